package dev.edgespec.core;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.List;
import java.util.Map;

/**
 * A bundle directory written by {@code edgespec export}: model.pte, tokenizer.json and
 * manifest.json (schema version, model, methods, speculative config, precision, SHA-256 of every
 * file, validation summary). {@link #open} checks the schema and every checksum before anything
 * else touches the files.
 */
public final class Bundle {
  public final File dir;
  public final Map<String, Object> manifest;

  private Bundle(File dir, Map<String, Object> manifest) {
    this.dir = dir;
    this.manifest = manifest;
  }

  public static Bundle open(File dir) throws BundleException {
    return open(dir, true);
  }

  public static Bundle open(File dir, boolean verifyChecksums) throws BundleException {
    if (!dir.isDirectory()) throw new BundleException("bundle '" + dir + "' not found (expected a directory made by `edgespec export`)");
    File mf = new File(dir, "manifest.json");
    if (!mf.isFile()) throw new BundleException("bundle '" + dir + "' has no manifest.json");
    Map<String, Object> m;
    try {
      m = Json.object(Json.parse(new String(Files.readAllBytes(mf.toPath()), StandardCharsets.UTF_8)), "manifest.json");
    } catch (IOException | IllegalArgumentException e) {
      throw new BundleException("bundle '" + dir + "': manifest.json is not valid JSON (" + e.getMessage() + ")");
    }
    Object version = m.get("schema_version");
    if (!(version instanceof Long) || ((Long) version) != ProgramContract.SCHEMA_VERSION) {
      throw new BundleException("bundle '" + dir + "': schema_version " + version + " is not supported (expected " + ProgramContract.SCHEMA_VERSION + ")");
    }
    Bundle b = new Bundle(dir, m);
    if (verifyChecksums) b.verify();
    return b;
  }

  /** Every file listed in the manifest exists and has its SHA-256. */
  public void verify() throws BundleException {
    Object files = manifest.get("files");
    if (!(files instanceof Map)) throw new BundleException("bundle '" + dir + "': manifest.json lists no files");
    for (Map.Entry<String, Object> e : Json.object(files, "files").entrySet()) {
      File f = new File(dir, e.getKey());
      if (!f.isFile()) throw new BundleException("bundle '" + dir + "': file '" + e.getKey() + "' listed in the manifest is missing");
      String want = (String) Json.object(e.getValue(), e.getKey()).get("sha256");
      if (!sha256(f).equals(want)) throw new BundleException("bundle '" + dir + "': file '" + e.getKey() + "' is corrupt (SHA-256 does not match the manifest)");
    }
  }

  public File program() {
    return new File(dir, "model.pte");
  }

  public File tokenizerFile() {
    return new File(dir, (String) tokenizerInfo().get("file"));
  }

  public Map<String, Object> tokenizerInfo() {
    return Json.object(manifest.get("tokenizer"), "tokenizer");
  }

  public long[] eosIds() {
    return Json.longs(tokenizerInfo().get("eos_ids"), "tokenizer.eos_ids");
  }

  public String precision() {
    return String.valueOf(manifest.get("precision"));
  }

  /** What the program asks of the runtime (manifest {@code runtime}), for explaining a failed load. */
  public RuntimeNeeds runtimeNeeds() {
    return RuntimeNeeds.of(manifest);
  }

  public boolean hasSpec() {
    Object methods = manifest.get("methods");
    return methods instanceof List && ((List<?>) methods).contains(ProgramContract.SPEC_STEP);
  }

  /**
   * The hybrid draft the bundle decodes with (manifest {@code speculative.lookup}): suffix matches
   * of at least this many tokens go first in the draft; 0 (or a bundle before it) the drafter only.
   */
  public int specLookup() {
    Object spec = manifest.get("speculative");
    if (!(spec instanceof Map)) return 0;
    Object v = Json.object(spec, "speculative").get("lookup");
    return v instanceof Number ? ((Number) v).intValue() : 0;
  }

  static String sha256(File f) throws BundleException {
    try (InputStream in = new FileInputStream(f)) {
      MessageDigest md = MessageDigest.getInstance("SHA-256");
      byte[] buf = new byte[1 << 20];
      for (int n; (n = in.read(buf)) > 0; ) md.update(buf, 0, n);
      StringBuilder hex = new StringBuilder();
      for (byte x : md.digest()) hex.append(String.format("%02x", x));
      return hex.toString();
    } catch (IOException | NoSuchAlgorithmException e) {
      throw new BundleException("cannot read '" + f + "': " + e.getMessage());
    }
  }
}
