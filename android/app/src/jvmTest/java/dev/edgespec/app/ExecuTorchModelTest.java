package dev.edgespec.app;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import dev.edgespec.core.Bundle;
import dev.edgespec.core.BundleException;
import dev.edgespec.core.ProgramContract;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import org.junit.After;
import org.junit.Test;
import org.pytorch.executorch.Module;

/**
 * The app's adapter over a runtime that cannot load the program (the signature stub of
 * ExecuTorch's Module, as the prebuilt AAR is for a program that calls edgespec's operators):
 * the failure names what the bundle's manifest says is missing and the two ways forward.
 * Runs on the JVM through tests/test_android_core.py (not a Gradle unit test: it needs the stub).
 */
public class ExecuTorchModelTest {
  private static final String BLOCK_KERNEL = "[\"aten::view_copy.out\", \"edgespec::block_linear.out\", \"edgespec::rms_norm.out\", \"llama::update_cache.out\"]";

  @After
  public void reset() {
    Module.loadMethodError = null;
    Module.destroyed = false;
  }

  /** A bundle directory whose manifest has this runtime record (null: none, an older bundle). */
  private static Bundle bundle(String runtimeJson) throws Exception {
    File dir = Files.createTempDirectory("bundle").toFile();
    String runtime = runtimeJson == null ? "" : ", \"runtime\": " + runtimeJson;
    String manifest = "{\"schema_version\": " + ProgramContract.SCHEMA_VERSION + ", \"files\": {}" + runtime + "}";
    Files.write(new File(dir, "manifest.json").toPath(), manifest.getBytes(StandardCharsets.UTF_8));
    return Bundle.open(dir);
  }

  private static String failure(Bundle b) {
    try {
      new ExecuTorchModel(b.program().getAbsolutePath(), b.runtimeNeeds());
    } catch (BundleException e) {
      return e.getMessage();
    }
    fail("expected the load to fail");
    return null;
  }

  @Test
  public void aProgramThatNeedsEdgespecOpsNamesThemAndBothWaysForward() throws Exception {
    Bundle b = bundle("{\"operators\": " + BLOCK_KERNEL + ", \"delegates\": []}");
    assertEquals(2, b.runtimeNeeds().extraOperators().size());
    String msg = failure(b);
    assertTrue(msg, msg.contains("stub: no ExecuTorch runtime on the JVM")); // what the runtime said
    assertTrue(msg, msg.contains("• edgespec::block_linear.out\n") && msg.contains("• edgespec::rms_norm.out\n"));
    assertFalse(msg, msg.contains("aten::view_copy.out") || msg.contains("llama::update_cache.out")); // stock kernels are not missing
    assertTrue(msg, msg.contains("android/kernels") && msg.contains("app/build.gradle"));
    assertTrue(msg, msg.contains("edgespec export recipes/smollm2-135m-stock-aar.yaml"));
  }

  @Test
  public void aMethodThatFailsToLoadIsNamedWithExecuTorchsErrorAndTheModuleFreed() throws Exception {
    Module.loadMethodError = 0x14;
    String msg = failure(bundle("{\"operators\": " + BLOCK_KERNEL + "}"));
    assertTrue(msg, msg.contains("method 'forward': error 0x14 OperatorMissing"));
    assertTrue(msg, msg.contains("• edgespec::block_linear.out"));
    assertTrue(Module.destroyed);
  }

  @Test
  public void aStockProgramPointsAtTheRuntimeNotTheKernels() throws Exception {
    Module.loadMethodError = 0x30;
    String msg = failure(bundle("{\"operators\": [\"aten::add.out\"], \"delegates\": [\"XnnpackBackend\"]}"));
    assertTrue(msg, msg.contains("error 0x30 DelegateInvalidCompatibility"));
    assertTrue(msg, msg.contains("uses only ExecuTorch's own kernels and XnnpackBackend"));
    assertFalse(msg, msg.contains("Two ways forward"));
  }

  @Test
  public void aBundleWithoutARuntimeRecordSaysHowToFindOut() throws Exception {
    String msg = failure(bundle(null));
    assertFalse(bundle(null).runtimeNeeds().recorded);
    assertTrue(msg, msg.contains("`edgespec info BUNDLE`") && msg.contains("Two ways forward"));
  }
}
