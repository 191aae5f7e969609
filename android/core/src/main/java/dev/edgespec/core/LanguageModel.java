package dev.edgespec.core;

/**
 * What the decoding loops need from a program (see {@link ProgramContract}). The app implements
 * it over ExecuTorch's {@code Module}; tests implement it over recorded calls.
 */
public interface LanguageModel {
  int maxSeqLen();

  int vocabSize();

  long[] eosIds();

  /** Logits of the last position [V] after feeding `tokens` at positions startPos.. . */
  float[] forward(long[] tokens, long startPos);

  boolean hasSpec();

  /** Tree depth D (streams used), top-K per depth, tree size R: from the spec metadata methods. */
  int specDepth();

  int specTopK();

  int specTreeSize();

  /**
   * One verify-and-draft call. draft is [D, K] row-major, uniforms [R, K], gumbel [V].
   * Returns the emitted tokens (1..D+1) and the next draft [D, K].
   */
  SpecStep specStep(long last, long[] draft, long pos, float temperature, float[] uniforms, float[] gumbel);

  /** Sequences {@link #decodeRows} decodes side by side (1: the program has no batched method). */
  default int batchSlots() {
    return 1;
  }

  /**
   * Rows of several sequences in one call ({@link ProgramContract#DECODE_ROWS}): row t is at
   * position positions[t] of the sequence in cache slot slots[t]; returns the logits [E][V] of
   * the rows {@code emit} names.
   */
  default float[][] decodeRows(long[] tokens, long[] slots, long[] positions, long[] emit) {
    throw new UnsupportedOperationException("this program has no batched method (export it with export.batch_slots > 1)");
  }

  /** The result of one spec_step call. */
  final class SpecStep {
    public final long[] tokens;
    public final long[] nextDraft;

    public SpecStep(long[] tokens, long[] nextDraft) {
      this.tokens = tokens;
      this.nextDraft = nextDraft;
    }
  }
}
