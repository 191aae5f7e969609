package dev.edgespec.app;

import dev.edgespec.core.BundleException;
import dev.edgespec.core.LanguageModel;
import dev.edgespec.core.ProgramContract;
import dev.edgespec.core.RuntimeNeeds;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Module;
import org.pytorch.executorch.Tensor;

/**
 * The edgespec LanguageModel over ExecuTorch's Android Module: forward and spec_step as the
 * runtime contract defines them, metadata read once from the program's constant methods.
 * Uses nothing from android.*, so it is type-checked on the JVM (against signature stubs).
 *
 * <p>Every method is loaded up front: ExecuTorch resolves a method's operators when it loads it,
 * so a program that needs kernels this runtime lacks fails here, with the bundle's {@link
 * RuntimeNeeds} saying which and what to do, not at the first token.
 */
public final class ExecuTorchModel implements LanguageModel {
  private final Module module;
  private final int maxSeqLen;  // the context
  private final int callTokens;  // the most tokens one forward call takes (a longer prompt is fed in chunks)
  private final int vocabSize;
  private final long[] eosIds;
  private final boolean hasSpec;
  private final int depth;
  private final int topK;
  private final int treeSize;
  private final int batchSlots;

  public ExecuTorchModel(String ptePath, RuntimeNeeds needs) throws BundleException {
    module = load(ptePath, needs);
    maxSeqLen = (int) constant(ProgramContract.GET_MAX_CONTEXT_LEN);
    // ExecuTorch's get_max_seq_len: tokens per call (programs before export.prefill_chunk answered the context)
    callTokens = Math.min((int) constant(ProgramContract.GET_MAX_SEQ_LEN), maxSeqLen - 1);
    vocabSize = (int) constant(ProgramContract.GET_VOCAB_SIZE);
    EValue[] eos = module.execute(ProgramContract.GET_EOS_IDS);
    eosIds = new long[eos.length];
    for (int i = 0; i < eos.length; i++) eosIds[i] = eos[i].toInt();
    boolean spec = false;
    for (String m : module.getMethods()) spec |= ProgramContract.SPEC_STEP.equals(m);
    hasSpec = spec;
    depth = spec ? (int) constant(ProgramContract.GET_SPEC_DEPTH) : 0;
    topK = spec ? (int) constant(ProgramContract.GET_SPEC_TOPK) : 0;
    treeSize = spec ? (int) constant(ProgramContract.GET_SPEC_TREE_SIZE) : 0;
    boolean batched = false;
    for (String m : module.getMethods()) batched |= ProgramContract.DECODE_ROWS.equals(m);
    batchSlots = batched ? (int) constant(ProgramContract.GET_BATCH_SLOTS) : 1;
  }

  private static Module load(String ptePath, RuntimeNeeds needs) throws BundleException {
    Module m;
    try {
      m = Module.load(ptePath, Module.LOAD_MODE_MMAP);
    } catch (RuntimeException e) {
      throw new BundleException(needs.loadFailure(said(e)));
    }
    String failure = null;
    try {
      for (String method : m.getMethods()) {
        int err = m.loadMethod(method);
        if (err != 0) {
          failure = String.format(java.util.Locale.US, "method '%s': error 0x%02x %s", method, err, RuntimeNeeds.errorName(err));
          break;
        }
      }
    } catch (RuntimeException e) {
      failure = said(e);
    }
    if (failure != null) {
      m.destroy();
      throw new BundleException(needs.loadFailure(failure));
    }
    return m;
  }

  private static String said(RuntimeException e) {
    return e.getMessage() == null ? e.toString() : e.getMessage();
  }

  private long constant(String method) {
    return module.execute(method)[0].toInt();
  }

  private static EValue longs(long[] data, long... shape) {
    return EValue.from(Tensor.fromBlob(data, shape));
  }

  private static EValue floats(float[] data, long... shape) {
    return EValue.from(Tensor.fromBlob(data, shape));
  }

  @Override public int maxSeqLen() { return maxSeqLen; }
  @Override public int vocabSize() { return vocabSize; }
  @Override public long[] eosIds() { return eosIds.clone(); }
  @Override public boolean hasSpec() { return hasSpec; }
  @Override public int specDepth() { return depth; }
  @Override public int specTopK() { return topK; }
  @Override public int specTreeSize() { return treeSize; }
  @Override public int batchSlots() { return batchSlots; }

  @Override
  public float[][] decodeRows(long[] tokens, long[] slots, long[] positions, long[] emit) {
    if (batchSlots == 1) return LanguageModel.super.decodeRows(tokens, slots, positions, emit);
    EValue[] out = module.execute(
        ProgramContract.DECODE_ROWS, longs(tokens, 1, tokens.length), longs(slots, slots.length), longs(positions, positions.length), longs(emit, emit.length));
    float[] all = out[0].toTensor().getDataAsFloatArray();
    float[][] rows = new float[emit.length][vocabSize];
    for (int e = 0; e < emit.length; e++) System.arraycopy(all, e * vocabSize, rows[e], 0, vocabSize);
    return rows;
  }

  @Override
  public float[] forward(long[] tokens, long startPos) {
    int tailAt = (tokens.length - 1) / callTokens * callTokens;  // every chunk before it: fed for the cache
    for (int s = 0; s < tailAt; s += callTokens) {
      long[] chunk = java.util.Arrays.copyOfRange(tokens, s, s + callTokens);
      module.execute(ProgramContract.FORWARD, longs(chunk, 1, chunk.length), longs(new long[] {startPos + s}, 1));
    }
    long[] tail = tailAt == 0 ? tokens : java.util.Arrays.copyOfRange(tokens, tailAt, tokens.length);
    EValue[] out = module.execute(ProgramContract.FORWARD, longs(tail, 1, tail.length), longs(new long[] {startPos + tailAt}, 1));
    float[] all = out[0].toTensor().getDataAsFloatArray();
    float[] last = new float[vocabSize];
    System.arraycopy(all, all.length - vocabSize, last, 0, vocabSize);
    return last;
  }

  @Override
  public SpecStep specStep(long last, long[] draft, long pos, float temperature, float[] uniforms, float[] gumbel) {
    EValue[] out = module.execute(
        ProgramContract.SPEC_STEP,
        longs(new long[] {last}, 1),
        longs(draft, depth, topK),
        longs(new long[] {pos}, 1),
        floats(new float[] {temperature}, 1),
        floats(uniforms, treeSize, topK),
        floats(gumbel, vocabSize));
    long[] toks = out[0].toTensor().getDataAsLongArray();
    int n = (int) out[1].toTensor().getDataAsLongArray()[0];
    long[] emitted = new long[n];
    System.arraycopy(toks, 0, emitted, 0, n);
    return new SpecStep(emitted, out[2].toTensor().getDataAsLongArray());
  }

  public void close() {
    module.destroy();
  }
}
