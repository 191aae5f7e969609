package dev.edgespec.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.File;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import org.junit.Test;

public class BundleTest {
  private static File copyOf(File src) throws Exception {
    File dst = Files.createTempDirectory("bundle").toFile();
    for (File f : src.listFiles()) Files.copy(f.toPath(), new File(dst, f.getName()).toPath(), StandardCopyOption.REPLACE_EXISTING);
    return dst;
  }

  private static String failure(File dir) {
    try {
      Bundle.open(dir);
    } catch (BundleException e) {
      return e.getMessage();
    }
    fail("expected a BundleException for " + dir);
    return null;
  }

  @Test
  public void readsABundleWrittenByPython() throws Exception {
    Bundle b = Bundle.open(Fixtures.file("bundle"));
    assertEquals("fp32", b.precision());
    assertEquals(2L, b.eosIds()[0]);
    assertTrue(b.hasSpec());
    assertEquals(2, b.specLookup()); // the fixture's manifest records the hybrid draft of 2
    assertTrue(b.program().isFile() && b.tokenizerFile().isFile());
  }

  @Test
  public void rejectsACorruptFile() throws Exception {
    File dir = copyOf(Fixtures.file("bundle"));
    try (RandomAccessFile f = new RandomAccessFile(new File(dir, "model.pte"), "rw")) {
      f.seek(3);
      f.write(0x5A);
    }
    String msg = failure(dir);
    assertTrue(msg, msg.contains("file 'model.pte' is corrupt (SHA-256 does not match the manifest)"));
  }

  @Test
  public void rejectsAMissingFileAndABadManifest() throws Exception {
    File dir = copyOf(Fixtures.file("bundle"));
    new File(dir, "tokenizer.json").delete();
    assertTrue(failure(dir).contains("file 'tokenizer.json' listed in the manifest is missing"));
    Files.write(new File(dir, "manifest.json").toPath(), "{\"schema_version\": 99}".getBytes());
    assertTrue(failure(dir).contains("schema_version 99 is not supported"));
    Files.write(new File(dir, "manifest.json").toPath(), "{not json".getBytes());
    assertTrue(failure(dir).contains("manifest.json is not valid JSON"));
    assertTrue(failure(new File(dir, "nope")).contains("not found"));
  }
}
