package org.pytorch.executorch;

/**
 * Test-only stand-in with the public signatures of org.pytorch:executorch-android 1.0.1's Module,
 * so the app's adapter is type-checked on the JVM here. Never packaged. It runs no program: a
 * load fails as a runtime without the program's kernels does (ExecuTorchModelTest).
 */
public class Module {
  public static final int LOAD_MODE_FILE = 0;
  public static final int LOAD_MODE_MMAP = 1;

  /** Test-only: null, load() throws; otherwise load() succeeds and every loadMethod answers this ExecuTorch error code. */
  public static Integer loadMethodError = null;
  public static boolean destroyed = false;

  private Module() {}

  public static Module load(String modelPath) { return load(modelPath, LOAD_MODE_FILE); }
  public static Module load(String modelPath, int loadMode) {
    if (loadMethodError == null) throw new RuntimeException("stub: no ExecuTorch runtime on the JVM");
    return new Module();
  }
  public static Module load(String modelPath, int loadMode, int numThreads) { throw new UnsupportedOperationException("stub"); }
  public EValue[] forward(EValue... inputs) { throw new UnsupportedOperationException("stub"); }
  public EValue[] execute(String methodName, EValue... inputs) { throw new UnsupportedOperationException("stub"); }
  public int loadMethod(String methodName) { return loadMethodError; }
  public String[] getMethods() { return new String[] {"forward", "get_max_seq_len"}; }
  public void destroy() { destroyed = true; }
}
