package org.pytorch.executorch;

/** Test-only stand-in with the public signatures of executorch-android 1.0.1's Tensor. */
public abstract class Tensor {
  private Tensor() {}

  public static Tensor fromBlob(int[] data, long[] shape) { throw new UnsupportedOperationException("stub"); }
  public static Tensor fromBlob(float[] data, long[] shape) { throw new UnsupportedOperationException("stub"); }
  public static Tensor fromBlob(long[] data, long[] shape) { throw new UnsupportedOperationException("stub"); }
  public static Tensor fromBlob(double[] data, long[] shape) { throw new UnsupportedOperationException("stub"); }
  public long numel() { throw new UnsupportedOperationException("stub"); }
  public long[] shape() { throw new UnsupportedOperationException("stub"); }
  public abstract DType dtype();
  public int[] getDataAsIntArray() { throw new UnsupportedOperationException("stub"); }
  public float[] getDataAsFloatArray() { throw new UnsupportedOperationException("stub"); }
  public long[] getDataAsLongArray() { throw new UnsupportedOperationException("stub"); }
}
