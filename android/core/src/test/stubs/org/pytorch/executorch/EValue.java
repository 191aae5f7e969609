package org.pytorch.executorch;

/** Test-only stand-in with the public signatures of executorch-android 1.0.1's EValue. */
public class EValue {
  private EValue() {}

  public boolean isTensor() { throw new UnsupportedOperationException("stub"); }
  public boolean isInt() { throw new UnsupportedOperationException("stub"); }
  public static EValue from(Tensor tensor) { throw new UnsupportedOperationException("stub"); }
  public static EValue from(boolean value) { throw new UnsupportedOperationException("stub"); }
  public static EValue from(long value) { throw new UnsupportedOperationException("stub"); }
  public static EValue from(double value) { throw new UnsupportedOperationException("stub"); }
  public static EValue from(String value) { throw new UnsupportedOperationException("stub"); }
  public Tensor toTensor() { throw new UnsupportedOperationException("stub"); }
  public boolean toBool() { throw new UnsupportedOperationException("stub"); }
  public long toInt() { throw new UnsupportedOperationException("stub"); }
  public double toDouble() { throw new UnsupportedOperationException("stub"); }
}
