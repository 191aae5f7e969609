package dev.edgespec.core;

import java.util.Random;

/** Token selection from logits: greedy (first maximum, like torch.argmax) at temperature 0, else softmax sampling. */
public final class Sampler {
  private Sampler() {}

  public static long sample(float[] logits, float temperature, Random rng) {
    if (temperature <= 0) return argmax(logits);
    double max = Double.NEGATIVE_INFINITY;
    for (float v : logits) max = Math.max(max, v);
    double[] p = new double[logits.length];
    double sum = 0;
    for (int i = 0; i < p.length; i++) {
      p[i] = Math.exp((logits[i] - max) / temperature);
      sum += p[i];
    }
    double u = rng.nextDouble() * sum;
    for (int i = 0; i < p.length; i++) {
      u -= p[i];
      if (u <= 0) return i;
    }
    return argmax(logits);
  }

  public static int argmax(float[] logits) {
    int best = 0;
    for (int i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
    return best;
  }
}
