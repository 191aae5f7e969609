package dev.edgespec.app;

import android.os.Bundle;
import android.widget.Button;
import android.widget.EditText;
import android.widget.ScrollView;
import android.widget.TextView;
import androidx.appcompat.app.AppCompatActivity;
import androidx.appcompat.widget.SwitchCompat;
import dev.edgespec.core.AdaptiveSpeculation;
import dev.edgespec.core.BundleException;
import dev.edgespec.core.ByteLevelBpe;
import dev.edgespec.core.ChatFormat;
import dev.edgespec.core.Decoder;
import dev.edgespec.core.Generation;
import java.io.File;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * Chat screen: prompt in, streamed text out, tokens/s and tokens per call shown, a switch
 * between speculative and autoregressive decoding. The bundle is read from
 * /data/local/tmp/edgespec/bundle (scripts/push_bundle.sh puts it there) or the path in the
 * launch intent's "bundle" extra; its checksums are verified before the program is loaded. A
 * bundle this runtime cannot load (e.g. one that needs edgespec's kernels on the prebuilt AAR)
 * fills the screen with what is missing and the two ways forward ({@code RuntimeNeeds}).
 */
public class MainActivity extends AppCompatActivity {
  static final String DEFAULT_BUNDLE = "/data/local/tmp/edgespec/bundle";
  private static final int MAX_NEW_TOKENS = 256;

  private final ExecutorService worker = Executors.newSingleThreadExecutor();
  private ExecuTorchModel model;
  private ByteLevelBpe tokenizer;
  private boolean chatTemplate;
  private volatile int lookup;
  private final AdaptiveSpeculation policy = new AdaptiveSpeculation(); // speculative steps only while they pay on this phone
  private TextView status, chat, stats;

  @Override
  protected void onCreate(Bundle saved) {
    super.onCreate(saved);
    setContentView(R.layout.activity_main);
    status = findViewById(R.id.status);
    chat = findViewById(R.id.chat);
    stats = findViewById(R.id.stats);
    EditText prompt = findViewById(R.id.prompt);
    Button send = findViewById(R.id.send);
    SwitchCompat spec = findViewById(R.id.spec);
    ScrollView scroll = findViewById(R.id.scroll);

    String path = getIntent().getStringExtra("bundle");
    File dir = new File(path != null ? path : DEFAULT_BUNDLE);
    send.setEnabled(false);
    status.setText("loading " + dir + " …");
    worker.execute(() -> {
      try {
        dev.edgespec.core.Bundle b = dev.edgespec.core.Bundle.open(dir); // checksums first
        tokenizer = ByteLevelBpe.fromFile(b.tokenizerFile());
        chatTemplate = b.tokenizerInfo().get("chat_template") != null;
        lookup = b.specLookup(); // the hybrid draft the bundle was validated with
        model = new ExecuTorchModel(b.program().getAbsolutePath(), b.runtimeNeeds()); // every method loaded, or why not
        boolean hasSpec = model.hasSpec();
        runOnUiThread(() -> {
          status.setText(b.precision() + " · context " + model.maxSeqLen() + (hasSpec ? " · speculative tree depth " + model.specDepth() : " · autoregressive only"));
          spec.setEnabled(hasSpec);
          spec.setChecked(hasSpec);
          send.setEnabled(true);
        });
      } catch (BundleException e) { // the bundle's own words: a missing or corrupt file, or the runtime it needs
        runOnUiThread(() -> {
          status.setText("cannot load the bundle " + dir);
          chat.setText(e.getMessage());
          spec.setEnabled(false);
        });
      } catch (Exception e) {
        runOnUiThread(() -> status.setText("cannot load the bundle: " + e.getMessage()));
      }
    });

    send.setOnClickListener(v -> {
      String text = prompt.getText().toString().trim();
      if (text.isEmpty()) return;
      prompt.setText("");
      send.setEnabled(false);
      boolean speculative = spec.isChecked();
      chat.append("\n> " + text + "\n");
      CharSequence before = chat.getText();
      worker.execute(() -> {
        List<Long> ids = new ArrayList<>();
        for (int id : tokenizer.encode(chatTemplate ? ChatFormat.smollm2(text) : text)) ids.add((long) id);
        List<Integer> out = new ArrayList<>();
        try {
          Decoder.TokenListener onToken = tok -> {
            out.add((int) tok);
            String sofar = tokenizer.decode(out);
            runOnUiThread(() -> {
              chat.setText(before);
              chat.append(sofar);
              scroll.fullScroll(ScrollView.FOCUS_DOWN);
            });
          };
          Generation g = speculative
              ? Decoder.generateSpec(model, ids, MAX_NEW_TOKENS, 0f, 0, lookup, policy, onToken)
              : Decoder.generate(model, ids, MAX_NEW_TOKENS, 0f, 0, onToken);
          String line = String.format(java.util.Locale.US, "%s: %.1f tok/s decode, %.2f tokens per call, %d of %d calls speculative, %d tokens, prefill %d ms",
              speculative ? "speculative" : "autoregressive", g.decodeTokensPerSecond(), g.meanAccepted(), g.speculativeCalls, g.decodeCalls(),
              g.completion.size(), g.prefillNanos / 1_000_000);
          runOnUiThread(() -> stats.setText(line));
        } catch (RuntimeException e) {
          runOnUiThread(() -> stats.setText("error: " + e.getMessage()));
        }
        runOnUiThread(() -> send.setEnabled(true));
      });
    });
  }

  @Override
  protected void onDestroy() {
    worker.shutdownNow();
    if (model != null) model.close();
    super.onDestroy();
  }
}
