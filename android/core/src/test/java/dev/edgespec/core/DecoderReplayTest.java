package dev.edgespec.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/** The Java loops reproduce the Python runtime's calls and tokens on golden fixtures from a real .pte. */
public class DecoderReplayTest {
  private static List<Long> longs(Object v) {
    List<Long> out = new ArrayList<>();
    for (long x : Json.longs(v, "ids")) out.add(x);
    return out;
  }

  private static void replay(File f) throws Exception {
    Map<String, Object> fx = Json.object(Fixtures.json(f.getName()), f.getName());
    ReplayModel model = new ReplayModel(fx);
    List<Long> prompt = longs(fx.get("prompt"));
    int maxNew = ((Number) fx.get("max_new_tokens")).intValue();
    boolean spec = fx.get("lookup") != null; // spec fixtures record the lookup they decoded with (0: the drafter only)
    Generation g = spec
        ? Decoder.generateSpec(model, prompt, maxNew, 0f, 0, ((Number) fx.get("lookup")).intValue(), null)
        : Decoder.generate(model, prompt, maxNew, 0f, 0, null);
    assertEquals(f.getName() + ": tokens", longs(fx.get("completion")), g.completion);
    assertEquals(f.getName() + ": stopped by EOS", fx.get("stopped_by_eos"), g.stoppedByEos);
    assertTrue(f.getName() + ": every recorded call was made", model.allCallsUsed());
    if (spec) {
      List<Integer> perCall = new ArrayList<>();
      for (long x : Json.longs(fx.get("tokens_per_call"), "tokens_per_call")) perCall.add((int) x);
      assertEquals(f.getName() + ": tokens per call", perCall, g.tokensPerCall);
    }
  }

  @Test
  public void replaysEveryGoldenFixture() throws Exception {
    File[] files = Fixtures.dir().listFiles((d, n) -> n.startsWith("replay_") && n.endsWith(".json"));
    assertTrue("no replay fixtures", files != null && files.length >= 2);
    for (File f : files) replay(f);
  }

  @Test
  public void suffixMatcherDraftsWhatFollowedTheFirstEarlierMatch() {
    // tokens 1 2 3 9 1 2 3: the longest suffix seen earlier is "1 2 3", first followed by 9
    SuffixMatcher m = new SuffixMatcher(List.of(1L, 2L, 3L, 9L, 1L, 2L));
    m.extend(3L);
    assertEquals(3, m.matchLength());
    assertArrayEquals(new long[] {9L, 1L, 2L}, m.draft(3, 1));
    assertArrayEquals(new long[0], m.draft(3, 4)); // shorter than the minimum match
    m.extend(7L); // "3 7" never occurred before: no match
    assertEquals(0, m.matchLength());
    assertArrayEquals(new long[0], m.draft(3, 1));
  }

  @Test
  public void withLookupPutsTheContinuationFirstAndKeepsSiblingsDistinct() {
    long[] draft = {5, 6, 7, 8, 9, 10}; // depth 2, k 3
    assertArrayEquals(new long[] {6, 5, 7, 42, 8, 9}, Decoder.withLookup(draft, 2, 3, new long[] {6, 42}));
    assertArrayEquals(new long[] {1, 5, 6, 8, 9, 10}, Decoder.withLookup(draft, 2, 3, new long[] {1}));
  }

  @Test
  public void placeholderDraftHasDistinctSiblings() {
    assertEquals(List.of(0L, 1L, 2L, 0L, 1L, 2L), longs(Json.parse("[0,1,2,0,1,2]")));
    long[] d = Decoder.placeholderDraft(2, 3);
    assertEquals(6, d.length);
    assertEquals(2, d[5]);
  }
}
