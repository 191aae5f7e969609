package dev.edgespec.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.Test;

/** The same scenarios as tests/test_adaptive.py: the Java policy decides as the Python one. */
public class AdaptiveSpeculationTest {
  /** {@code calls} calls: an autoregressive call takes arNanos, a step stepNanos and emits tokens. */
  private static List<Boolean> drive(AdaptiveSpeculation p, int calls, long arNanos, long stepNanos, int tokens) {
    List<Boolean> kinds = new ArrayList<>();
    for (int i = 0; i < calls; i++) {
      boolean spec = p.speculate(false);
      p.record(spec, spec ? stepNanos : arNanos, spec ? tokens : 1, false);
      kinds.add(spec);
    }
    return kinds;
  }

  private static List<Integer> autoregressiveStretches(List<Boolean> kinds) {
    List<Integer> runs = new ArrayList<>();
    boolean inRun = false;
    for (boolean spec : kinds) {
      if (!spec) {
        if (inRun) runs.set(runs.size() - 1, runs.get(runs.size() - 1) + 1);
        else runs.add(1);
      }
      inRun = !spec;
    }
    return runs;
  }

  @Test
  public void keepsSpeculatingWhereItPays() {
    AdaptiveSpeculation p = new AdaptiveSpeculation(1.05, 4, 3, 16, 512);
    List<Boolean> kinds = drive(p, 40, 10_000_000, 15_000_000, 2); // 2 tokens at 1.5x: 1.33x
    assertEquals(List.of(false, false, false), kinds.subList(0, 3));
    assertFalse(kinds.subList(3, 40).contains(false));
    assertEquals(2 * 10.0 / 15.0, p.gain(false), 1e-9);
  }

  @Test
  public void fallsBackAndTriesAgainLessOften() {
    AdaptiveSpeculation p = new AdaptiveSpeculation(1.05, 4, 2, 8, 32);
    List<Boolean> kinds = drive(p, 200, 10_000_000, 20_000_000, 2); // 1.0x < 1.05
    assertEquals(List.of(2, 8, 16, 32, 32), autoregressiveStretches(kinds).subList(0, 5));
    assertTrue(p.events().get(0), p.events().get(0).contains("autoregressive for 8 calls"));
  }

  @Test
  public void aClearLossEndsTheTryAfterHalfAWindow() {
    AdaptiveSpeculation p = new AdaptiveSpeculation(1.05, 8, 1, 16, 512);
    List<Boolean> kinds = drive(p, 30, 10_000_000, 20_000_000, 1); // 0.5x
    assertEquals(List.of(false, true, true, true, true, true), kinds.subList(0, 6));
    assertFalse(kinds.subList(6, 22).contains(true));
  }

  @Test
  public void aStepThatCannotPayIsDroppedAfterOneCall() {
    AdaptiveSpeculation p = new AdaptiveSpeculation(1.05, 8, 1, 16, 512);
    p.start(4);
    List<Boolean> kinds = drive(p, 60, 10_000_000, 45_000_000, 4);
    assertEquals(List.of(false, true, false), kinds.subList(0, 3));
    assertEquals(3, kinds.stream().filter(k -> k).count());
  }

  @Test
  public void matchedStepsAreJudgedApart() {
    AdaptiveSpeculation p = new AdaptiveSpeculation(1.05, 4, 1, 16, 512);
    p.start(4);
    int matchedSpec = 0, matchedCalls = 0, drafterSpec = 0;
    for (int call = 0; call < 200; call++) {
      boolean matched = call % 5 == 0;
      boolean spec = p.speculate(matched);
      // the drafter alone: 1 token at 2x; after a match: 4 tokens at 2x
      p.record(spec, spec ? 20_000_000 : 10_000_000, spec ? (matched ? 4 : 1) : 1, matched);
      if (call >= 100 && matched) {
        matchedCalls++;
        if (spec) matchedSpec++;
      }
      if (call >= 100 && !matched && spec) drafterSpec++;
    }
    assertEquals(matchedCalls, matchedSpec);
    assertTrue("drafter steps late: " + drafterSpec, drafterSpec <= 6);
  }

  @Test
  public void eachPromptGetsItsOwnTryAndAStreakThatPaidGoesOn() {
    AdaptiveSpeculation p = new AdaptiveSpeculation(1.05, 4, 2, 8, 512);
    p.start(4);
    drive(p, 12, 10_000_000, 20_000_000, 1); // 0.5x: backing off
    assertFalse(p.speculate(false));
    p.start(4);
    assertFalse(drive(p, 30, 10_000_000, 20_000_000, 3).contains(false)); // this prompt: 1.5x
    p.start(4);
    assertEquals(List.of(true, true, true, true, true), drive(p, 5, 10_000_000, 20_000_000, 3));
  }

  @Test(expected = IllegalArgumentException.class)
  public void rejectsNonsenseSettings() {
    new AdaptiveSpeculation(1.05, 8, 3, 64, 16);
  }
}
