package dev.edgespec.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * What a bundle's program asks of the runtime that loads it: the manifest's {@code runtime}
 * record (every operator its methods call, every backend it delegates to; written by {@code
 * edgespec export} from the lowered program). Mirrors edgespec.manifest.RuntimeNeeds, and turns a
 * failed program load into a message that says what is missing and the two ways forward.
 */
public final class RuntimeNeeds {
  /** Operator namespaces ExecuTorch's own kernels cover (edgespec.manifest.STOCK_NAMESPACES). */
  public static final List<String> STOCK_NAMESPACES =
      Collections.unmodifiableList(Arrays.asList("aten", "executorch_prim", "dim_order_ops", "quantized_decomposed", "llama"));

  /** False for a bundle exported before the manifest recorded its runtime. */
  public final boolean recorded;
  public final List<String> operators;
  public final List<String> delegates;

  private RuntimeNeeds(boolean recorded, List<String> operators, List<String> delegates) {
    this.recorded = recorded;
    this.operators = Collections.unmodifiableList(operators);
    this.delegates = Collections.unmodifiableList(delegates);
  }

  /** The record of a parsed manifest (absent: {@link #recorded} false, nothing listed). */
  public static RuntimeNeeds of(Map<String, Object> manifest) {
    Object v = manifest.get("runtime");
    if (v == null) return new RuntimeNeeds(false, new ArrayList<>(), new ArrayList<>());
    Map<String, Object> r = Json.object(v, "runtime");
    return new RuntimeNeeds(true, strings(r.get("operators"), "runtime.operators"), strings(r.get("delegates"), "runtime.delegates"));
  }

  private static List<String> strings(Object v, String what) {
    List<String> out = new ArrayList<>();
    if (v == null) return out;
    for (Object x : Json.array(v, what)) out.add(String.valueOf(x));
    return out;
  }

  /** The operators beyond ExecuTorch's own kernels: edgespec's ops ("namespace::name.overload"). */
  public List<String> extraOperators() {
    List<String> out = new ArrayList<>();
    for (String op : operators) {
      int cut = op.indexOf("::");
      if (!STOCK_NAMESPACES.contains(cut < 0 ? op : op.substring(0, cut))) out.add(op);
    }
    return out;
  }

  /** ExecuTorch's name for a runtime error code (runtime/core/error.h), e.g. 0x14 OperatorMissing. */
  public static String errorName(int code) {
    switch (code) {
      case 0x01: return "Internal";
      case 0x02: return "InvalidState";
      case 0x10: return "NotSupported";
      case 0x11: return "NotImplemented";
      case 0x12: return "InvalidArgument";
      case 0x14: return "OperatorMissing";
      case 0x20: return "NotFound";
      case 0x21: return "MemoryAllocationFailed";
      case 0x22: return "AccessFailed";
      case 0x23: return "InvalidProgram";
      case 0x30: return "DelegateInvalidCompatibility";
      default: return "error";
    }
  }

  /**
   * What to show when the runtime cannot load the program: {@code cause} is what ExecuTorch said
   * (an exception message, or "method 'forward': error 0x14 OperatorMissing").
   */
  public String loadFailure(String cause) {
    StringBuilder s = new StringBuilder("The app's ExecuTorch runtime cannot load this bundle's program (" + cause + ").\n\n");
    List<String> extra = extraOperators();
    if (!recorded) {
      s.append("This bundle predates the manifest's runtime record. On the host, `edgespec info BUNDLE` reads its program and says which runtime it needs.\n\n");
    } else if (extra.isEmpty()) {
      s.append("The program uses only ExecuTorch's own kernels").append(delegates.isEmpty() ? "" : " and " + String.join(", ", delegates))
          .append(", so the prebuilt AAR should run it: check that the app's AAR is the ExecuTorch release the bundle was exported with")
          .append(delegates.isEmpty() ? "" : " and that it was built with those backends")
          .append(", and that the bundle was pushed whole (`edgespec verify BUNDLE`).");
      return s.toString();
    } else {
      s.append("It needs operators the prebuilt org.pytorch:executorch-android AAR does not have:\n");
      for (String op : extra) s.append("  • ").append(op).append('\n');
      s.append('\n');
    }
    s.append("Two ways forward (android/README.md):\n")
        .append("1. Build the AAR with edgespec's kernels linked in (android/kernels; the steps under \"Which bundles need edgespec's kernels in the runtime\"), point app/build.gradle at it and reinstall the app.\n")
        .append("2. Export a bundle the prebuilt AAR runs, with ExecuTorch's own kernels and XNNPACK only: `edgespec export recipes/smollm2-135m-stock-aar.yaml -o bundles/stock`, then push it.");
    return s.toString();
  }
}
