package dev.edgespec.core;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * Speculate only while it pays: the same policy as edgespec.runtime.adaptive (its docstring has
 * the whole rule). Before each decode call {@link Decoder#generateSpec} asks {@link #speculate}
 * whether to make a speculative step or one autoregressive call, and reports the call with
 * {@link #record}. Speculation pays by {@code gain = tokens per step * autoregressive seconds /
 * step seconds} over the last {@code window} steps of a class (steps whose draft starts with a
 * suffix match, and the drafter's own); a class below {@code minGain} (below 0.8 minGain after
 * half a window) decodes autoregressively for a back-off that doubles with each failed try; a try
 * that pays resets it, and the class then speculates while its gain over its last 4 windows
 * holds. A step that could not pay even accepting every draft ends its try at once. Greedy
 * output is the same whatever is chosen. One policy per loaded program.
 */
public final class AdaptiveSpeculation {
  private final double minGain;
  private final int window, arProbe, firstBackoff, maxBackoff;
  private final Window arNanos = new Window(16);
  private final Track[] tracks = new Track[2]; // [0] drafter steps, [1] steps after a suffix match
  private int maxTokens;
  private boolean stale = true;
  private final List<String> events = new ArrayList<>();

  private static final String[] CLASSES = {"drafter steps", "steps after a suffix match"};
  /** A gain below this share of minGain after half a window ends the try early. */
  private static final double CLEAR_LOSS = 0.8;
  /** Windows a streak that paid is judged over. */
  private static final int LONG = 4;

  /** Recent values, the oldest dropped past a capacity. */
  private static final class Window {
    final int capacity;
    final ArrayDeque<Double> values = new ArrayDeque<>();

    Window(int capacity) {
      this.capacity = capacity;
    }

    void add(double v) {
      if (values.size() == capacity) values.removeFirst();
      values.addLast(v);
    }

    double median() {
      double[] v = values.stream().mapToDouble(Double::doubleValue).toArray();
      Arrays.sort(v);
      int n = v.length;
      return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    }

    double mean() {
      double s = 0;
      for (double x : values) s += x;
      return s / values.size();
    }
  }

  private static final class Track {
    final Window stepNanos, tokens;
    int backoff, arLeft, paid;

    Track(int window, int backoff) {
      stepNanos = new Window(LONG * window);
      tokens = new Window(LONG * window);
      this.backoff = backoff;
    }
  }

  /** The defaults of edgespec.runtime.adaptive.AdaptiveSpeculation. */
  public AdaptiveSpeculation() {
    this(1.05, 8, 3, 16, 512);
  }

  public AdaptiveSpeculation(double minGain, int window, int arProbe, int firstBackoff, int maxBackoff) {
    if (!(minGain > 0 && window >= 1 && arProbe >= 1 && 1 <= firstBackoff && firstBackoff <= maxBackoff)) {
      throw new IllegalArgumentException("AdaptiveSpeculation needs minGain > 0, window >= 1, arProbe >= 1 and 1 <= firstBackoff <= maxBackoff");
    }
    this.minGain = minGain;
    this.window = window;
    this.arProbe = arProbe;
    this.firstBackoff = firstBackoff;
    this.maxBackoff = maxBackoff;
    for (int i = 0; i < 2; i++) tracks[i] = new Track(window, firstBackoff);
  }

  /**
   * A new generation whose steps emit at most {@code maxTokens} (0: unknown); the times are kept,
   * and a class that was backing off tries again from the first back-off (one whose steps paid
   * goes on with its measurements).
   */
  public void start(int maxTokens) {
    stale = true;
    this.maxTokens = maxTokens;
    events.clear();
    for (Track t : tracks) {
      if (t.arLeft > 0 || t.backoff != firstBackoff) {
        t.arLeft = 0;
        t.backoff = firstBackoff;
        t.paid = 0;
        t.stepNanos.values.clear();
        t.tokens.values.clear();
      }
    }
  }

  /** Whether the next call is a speculative step; {@code matched}: its draft would start with a suffix match. */
  public boolean speculate(boolean matched) {
    return arNanos.values.size() >= arProbe && tracks[matched ? 1 : 0].arLeft == 0;
  }

  /** One decode call: its kind, wall time, tokens emitted, and whether a suffix match was there. */
  public void record(boolean speculative, long nanos, int tokens, boolean matched) {
    Track t = tracks[matched ? 1 : 0];
    if (!speculative) {
      arNanos.add(nanos);
      stale = true;
      if (t.arLeft > 0 && --t.arLeft == 0) { // a new try measures itself
        t.stepNanos.values.clear();
        t.tokens.values.clear();
        t.paid = 0;
      }
      return;
    }
    t.stepNanos.add(nanos);
    boolean counted = matched || !stale; // a stale drafter draft predates the autoregressive calls: its cost counts, its tokens not
    stale = false;
    if (counted) {
      t.tokens.add(tokens);
      t.paid++;
    }
    double ratio = costRatio(t);
    if (maxTokens > 0 && maxTokens * ratio < minGain) {
      fallBack(matched, String.format(Locale.ROOT, "a step costs %.2fx an autoregressive call, more than the %d tokens it can emit", 1 / ratio, maxTokens));
      return;
    }
    int n = t.tokens.values.size();
    if (n < Math.max(1, window / 2) || (n < window && gain(matched) >= CLEAR_LOSS * minGain)) return;
    if (gain(matched) < minGain) {
      fallBack(matched, explain(matched));
    } else if (t.paid == window && t.backoff != firstBackoff) { // a try that pays
      t.backoff = firstBackoff;
      events.add("speculating (" + CLASSES[matched ? 1 : 0] + "): " + explain(matched));
    }
  }

  private void fallBack(boolean matched, String why) {
    Track t = tracks[matched ? 1 : 0];
    t.arLeft = t.backoff;
    events.add("autoregressive for " + t.backoff + " calls (" + CLASSES[matched ? 1 : 0] + "): " + why);
    t.backoff = Math.min(2 * t.backoff, maxBackoff);
  }

  private double costRatio(Track t) {
    double step = t.stepNanos.median();
    return step > 0 ? arNanos.median() / step : Double.POSITIVE_INFINITY;
  }

  /** tokens per step x autoregressive time / step time over the class's window; NaN before both are measured. */
  public double gain(boolean matched) {
    Track t = tracks[matched ? 1 : 0];
    if (arNanos.values.isEmpty() || t.tokens.values.isEmpty()) return Double.NaN;
    return t.tokens.mean() * costRatio(t);
  }

  /** What the class's last measurements say, in words. */
  public String explain(boolean matched) {
    double g = gain(matched);
    if (Double.isNaN(g)) return "not measured yet";
    Track t = tracks[matched ? 1 : 0];
    return String.format(Locale.ROOT, "%.2f tokens per step at %.2fx an autoregressive call's time = %.2fx", t.tokens.mean(), 1 / costRatio(t), g);
  }

  /** This generation's switches, each with its reason. */
  public List<String> events() {
    return new ArrayList<>(events);
  }
}
