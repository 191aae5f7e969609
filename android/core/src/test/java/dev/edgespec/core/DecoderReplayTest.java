package dev.edgespec.core;

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
    Generation g = "spec".equals(fx.get("kind"))
        ? Decoder.generateSpec(model, prompt, maxNew, 0f, 0, null)
        : Decoder.generate(model, prompt, maxNew, 0f, 0, null);
    assertEquals(f.getName() + ": tokens", longs(fx.get("completion")), g.completion);
    assertEquals(f.getName() + ": stopped by EOS", fx.get("stopped_by_eos"), g.stoppedByEos);
    assertTrue(f.getName() + ": every recorded call was made", model.allCallsUsed());
    if ("spec".equals(fx.get("kind"))) {
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
  public void placeholderDraftHasDistinctSiblings() {
    assertEquals(List.of(0L, 1L, 2L, 0L, 1L, 2L), longs(Json.parse("[0,1,2,0,1,2]")));
    long[] d = Decoder.placeholderDraft(2, 3);
    assertEquals(6, d.length);
    assertEquals(2, d[5]);
  }
}
