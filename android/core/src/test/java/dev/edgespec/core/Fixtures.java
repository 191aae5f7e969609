package dev.edgespec.core;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;

/** Fixtures written by the Python side (tests/test_android_core.py) into -Dedgespec.fixtures=DIR. */
final class Fixtures {
  private Fixtures() {}

  static File dir() {
    String d = System.getProperty("edgespec.fixtures");
    if (d == null || !new File(d).isDirectory()) {
      throw new IllegalStateException("no fixtures: run these tests through `python -m pytest tests/test_android_core.py`, which records them from the Python runtime and a real .pte");
    }
    return new File(d);
  }

  static File file(String name) {
    return new File(dir(), name);
  }

  static Object json(String name) throws IOException {
    return Json.parse(new String(Files.readAllBytes(file(name).toPath()), StandardCharsets.UTF_8));
  }
}
