package dev.edgespec.core;

/**
 * The prompt text for one user turn in ChatML, the format of SmolLM2's chat template (with its
 * default system prompt when none is given), ending where the assistant's answer starts. The
 * Python side renders the model's own Jinja template; a JVM test checks both give the same text.
 */
public final class ChatFormat {
  public static final String SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

  private ChatFormat() {}

  public static String chatml(String system, String user) {
    return "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
  }

  public static String smollm2(String user) {
    return chatml(SMOLLM2_DEFAULT_SYSTEM, user);
  }
}
