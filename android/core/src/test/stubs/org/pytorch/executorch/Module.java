package org.pytorch.executorch;

/**
 * Test-only stand-in with the public signatures of org.pytorch:executorch-android 1.0.1's Module,
 * so the app's adapter is type-checked on the JVM here. Never packaged; every body throws.
 */
public class Module {
  public static final int LOAD_MODE_FILE = 0;
  public static final int LOAD_MODE_MMAP = 1;

  private Module() {}

  public static Module load(String modelPath) { throw new UnsupportedOperationException("stub"); }
  public static Module load(String modelPath, int loadMode) { throw new UnsupportedOperationException("stub"); }
  public static Module load(String modelPath, int loadMode, int numThreads) { throw new UnsupportedOperationException("stub"); }
  public EValue[] forward(EValue... inputs) { throw new UnsupportedOperationException("stub"); }
  public EValue[] execute(String methodName, EValue... inputs) { throw new UnsupportedOperationException("stub"); }
  public int loadMethod(String methodName) { throw new UnsupportedOperationException("stub"); }
  public String[] getMethods() { throw new UnsupportedOperationException("stub"); }
  public void destroy() { throw new UnsupportedOperationException("stub"); }
}
