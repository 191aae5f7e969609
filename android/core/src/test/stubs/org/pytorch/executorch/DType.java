package org.pytorch.executorch;

/** Test-only stand-in for executorch-android 1.0.1's DType (the constants edgespec programs use). */
public enum DType {
  INT32,
  INT64,
  FLOAT,
  BOOL
}
