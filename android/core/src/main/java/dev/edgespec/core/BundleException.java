package dev.edgespec.core;

/** A bundle that cannot be used, with a message naming the file and the problem. */
public final class BundleException extends Exception {
  private static final long serialVersionUID = 1L;

  public BundleException(String message) {
    super(message);
  }
}
