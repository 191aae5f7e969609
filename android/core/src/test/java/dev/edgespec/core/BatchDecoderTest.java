package dev.edgespec.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/**
 * The batched decoder replays a trace the Python runtime recorded on a real batched program
 * (edgespec.runtime.batch_decode over decode_rows): every call must carry the recorded rows,
 * slots, positions and emitted rows, and the completions must be Python's.
 */
public class BatchDecoderTest {
  /** A program whose decode_rows replays the recorded calls (sparse logits: their top entries). */
  private static final class ReplayRows implements LanguageModel {
    final Map<String, Object> meta;
    final List<Object> calls;
    int next = 0;

    ReplayRows(Map<String, Object> fixture) {
      meta = Json.object(fixture.get("meta"), "meta");
      calls = Json.array(fixture.get("calls"), "calls");
    }

    private int meta(String k) {
      return ((Number) meta.get(k)).intValue();
    }

    @Override public int maxSeqLen() { return meta("max_seq_len"); }
    @Override public int vocabSize() { return meta("vocab_size"); }
    @Override public long[] eosIds() { return Json.longs(meta.get("eos_ids"), "eos_ids"); }
    @Override public int batchSlots() { return meta("batch_slots"); }
    @Override public float[] forward(long[] tokens, long startPos) { throw new AssertionError("the batched decoder calls decode_rows only"); }
    @Override public boolean hasSpec() { return false; }
    @Override public int specDepth() { return 0; }
    @Override public int specTopK() { return 0; }
    @Override public int specTreeSize() { return 0; }
    @Override public SpecStep specStep(long last, long[] draft, long pos, float t, float[] u, float[] g) { throw new AssertionError(); }

    @Override
    public float[][] decodeRows(long[] tokens, long[] slots, long[] positions, long[] emit) {
      assertTrue("more calls than recorded (" + calls.size() + ")", next < calls.size());
      Map<String, Object> c = Json.object(calls.get(next), "call");
      String at = "decode_rows call " + next;
      next++;
      assertArrayEquals(at + " tokens", Json.longs(c.get("tokens"), "tokens"), tokens);
      assertArrayEquals(at + " slots", Json.longs(c.get("slots"), "slots"), slots);
      assertArrayEquals(at + " positions", Json.longs(c.get("positions"), "positions"), positions);
      assertArrayEquals(at + " emit", Json.longs(c.get("emit"), "emit"), emit);
      List<Object> tops = Json.array(c.get("logits_top"), "logits_top");
      float[][] out = new float[emit.length][vocabSize()];
      for (int e = 0; e < emit.length; e++) {
        Arrays.fill(out[e], -1e30f);
        for (Object pair : Json.array(tops.get(e), "top")) {
          List<Object> p = Json.array(pair, "pair");
          out[e][((Number) p.get(0)).intValue()] = ((Number) p.get(1)).floatValue();
        }
      }
      return out;
    }
  }

  @Test
  public void decodesThePromptsWithPythonsScheduleAndTokens() throws Exception {
    Map<String, Object> fx = Json.object(Fixtures.json("replay_batched.json"), "fixture");
    ReplayRows model = new ReplayRows(fx);
    List<List<Long>> prompts = new ArrayList<>();
    for (Object p : Json.array(fx.get("prompts"), "prompts")) {
      List<Long> ids = new ArrayList<>();
      for (long x : Json.longs(p, "prompt")) ids.add(x);
      prompts.add(ids);
    }
    int slots = ((Number) fx.get("slots")).intValue(), callRows = ((Number) fx.get("call_rows")).intValue();
    List<Generation> got = BatchDecoder.generate(model, prompts, slots, callRows, ((Number) fx.get("max_new_tokens")).intValue(), 0f, 0);
    List<Object> want = Json.array(fx.get("completions"), "completions");
    for (int i = 0; i < prompts.size(); i++) {
      List<Long> w = new ArrayList<>();
      for (long x : Json.longs(want.get(i), "completion")) w.add(x);
      assertEquals("completion " + i, w, got.get(i).completion);
    }
    assertEquals("every recorded call replayed", model.calls.size(), model.next);
  }
}
