package dev.edgespec.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * A LanguageModel that replays calls recorded from the Python runtime on a real .pte: each call
 * must arrive in the recorded order with the recorded inputs, and gets the recorded outputs.
 * Forward logits are recorded sparsely (the top entries; the rest are far below).
 */
final class ReplayModel implements LanguageModel {
  private final Map<String, Object> meta;
  private final List<Object> calls;
  int next = 0;

  ReplayModel(Map<String, Object> fixture) {
    this.meta = Json.object(fixture.get("meta"), "meta");
    this.calls = Json.array(fixture.get("calls"), "calls");
  }

  private int meta(String k) {
    return ((Number) meta.get(k)).intValue();
  }

  private Map<String, Object> take(String method) {
    assertTrue("more calls than recorded (" + calls.size() + ")", next < calls.size());
    Map<String, Object> c = Json.object(calls.get(next), "call");
    assertEquals("call " + next + " method", c.get("method"), method);
    next++;
    return c;
  }

  @Override public int maxSeqLen() { return meta("max_seq_len"); }
  @Override public int vocabSize() { return meta("vocab_size"); }
  @Override public long[] eosIds() { return Json.longs(meta.get("eos_ids"), "eos_ids"); }
  @Override public boolean hasSpec() { return meta.get("depth") != null; }
  @Override public int specDepth() { return meta("depth"); }
  @Override public int specTopK() { return meta("topk"); }
  @Override public int specTreeSize() { return meta("tree_size"); }

  @Override
  public float[] forward(long[] tokens, long startPos) {
    Map<String, Object> c = take(ProgramContract.FORWARD);
    assertArrayEquals("forward tokens at call " + (next - 1), Json.longs(c.get("tokens"), "tokens"), tokens);
    assertEquals("forward pos at call " + (next - 1), ((Number) c.get("pos")).longValue(), startPos);
    float[] logits = new float[vocabSize()];
    Arrays.fill(logits, -1e30f);
    for (Object e : Json.array(c.get("logits_top"), "logits_top")) {
      List<Object> pair = Json.array(e, "pair");
      logits[((Number) pair.get(0)).intValue()] = ((Number) pair.get(1)).floatValue();
    }
    return logits;
  }

  @Override
  public SpecStep specStep(long last, long[] draft, long pos, float temperature, float[] uniforms, float[] gumbel) {
    Map<String, Object> c = take(ProgramContract.SPEC_STEP);
    int at = next - 1;
    assertEquals("spec_step last at call " + at, ((Number) c.get("last")).longValue(), last);
    assertArrayEquals("spec_step draft at call " + at, Json.longs(c.get("draft"), "draft"), draft);
    assertEquals("spec_step pos at call " + at, ((Number) c.get("pos")).longValue(), pos);
    assertEquals(specTreeSize() * specTopK(), uniforms.length);
    assertEquals(vocabSize(), gumbel.length);
    return new SpecStep(Json.longs(c.get("out_tokens"), "out_tokens"), Json.longs(c.get("next_draft"), "next_draft"));
  }

  boolean allCallsUsed() {
    return next == calls.size();
  }
}
