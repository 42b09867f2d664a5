// SPDX-License-Identifier: Apache-2.0
package dev.edgellm.test;

import dev.edgellm.Constraint;
import dev.edgellm.ConstraintResult;
import dev.edgellm.EdgellmException;
import dev.edgellm.Edgellm;
import dev.edgellm.GenerateOptions;
import dev.edgellm.GenerationStats;
import dev.edgellm.MemoryPlan;
import dev.edgellm.Model;
import dev.edgellm.Sampling;
import dev.edgellm.Session;
import dev.edgellm.SessionOptions;
import dev.edgellm.StopReason;
import java.io.File;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/**
 * The Java binding end to end on the bundled model (a plain main: no JUnit offline). Prints
 * "ok" or "FAIL" per check and exits 1 on any failure. Usage: ApiTest MODEL_DIR
 */
public final class ApiTest {
  private static int failures;

  private ApiTest() {}

  private static void check(boolean ok, String what) {
    System.out.println((ok ? "ok   " : "FAIL ") + what);
    if (!ok) ++failures;
  }

  private interface Body {
    void run() throws Exception;
  }

  /** Runs body and returns what it threw (null if nothing). */
  private static Throwable thrown(Body body) {
    try {
      body.run();
      return null;
    } catch (Throwable t) {
      return t;
    }
  }

  /** Tokens and text of one greedy generation. */
  private static final class Run {
    final List<Integer> tokens = new ArrayList<>();
    final StringBuilder text = new StringBuilder();
    GenerationStats stats;
  }

  private static Run generate(Session s, String prompt, GenerateOptions o) {
    Run r = new Run();
    r.stats = s.generate(prompt, o, (text, token) -> {
      r.tokens.add(token);
      r.text.append(text);
      return true;
    });
    return r;
  }

  private static SessionOptions greedy() {
    return SessionOptions.defaults().withSampling(Sampling.greedy()).withContextSize(256);
  }

  @SuppressWarnings("try") // closes inside try-with-resources on purpose
  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: ApiTest MODEL_DIR");
      System.exit(2);
    }
    final String dir = args[0];
    final long t0 = System.nanoTime();
    check(!Edgellm.version().isEmpty(), "version() = " + Edgellm.version());
    check(!Edgellm.buildInfo().isEmpty(), "buildInfo() = " + Edgellm.buildInfo());

    final GenerateOptions eight = GenerateOptions.defaults().withMaxNewTokens(8).withIgnoreEos(true);
    try (Model model = Model.load(dir)) {
      check(model.vocabSize() > 0, "vocabSize() > 0");
      check(model.maxContext() > 0, "maxContext() > 0");

      // Tokenizer round trip with non-BMP and non-ASCII text (UTF-8 across JNI both ways).
      String text = "And God said, Let there be light: \u00e9\u4e2d \uD83D\uDE00.";
      int[] ids = model.tokenize(text, false, false);
      check(ids.length > 0, "tokenize gives " + ids.length + " ids");
      check(text.equals(model.detokenize(ids, false)), "detokenize(tokenize(s)) == s (non-BMP)");

      try (Session s = model.newSession(greedy())) {
        check(s.contextSize() == 256, "contextSize() == 256");
        Run a = generate(s, "And God said", eight);
        check(a.tokens.size() == 8 && a.stats.newTokens() == 8,
            "streams 8 pieces: \"" + a.text + "\" " + a.stats);
        check(a.stats.stopReason() == StopReason.MAX_TOKENS, "stop reason MAX_TOKENS");
        // The last sampled token is forwarded by the next call (or not at all), so the cache
        // holds the prompt and 7 or 8 of the new tokens, depending on the implementation.
        long pos = s.position();
        check(pos == a.stats.promptTokens() + 7 || pos == a.stats.promptTokens() + 8,
            "position() " + pos + " == prompt " + a.stats.promptTokens() + " + 7 or 8");
        s.reset();
        check(s.position() == 0, "reset() empties the cache");
        Run b = generate(s, "And God said", eight);
        check(a.tokens.equals(b.tokens), "greedy after reset repeats the tokens");
        s.reset();
        check(s.generateText("And God said", eight).equals(a.text.toString()),
            "generateText() == the streamed pieces");

        // Cancel from the callback after one token: stops within one token, usable again.
        s.reset();
        final int[] calls = {0};
        GenerationStats c = s.generate("And God said", eight, (piece, token) -> {
          ++calls[0];
          return false;
        });
        check(calls[0] == 1, "callback returning false is called once (" + calls[0] + ")");
        check(c.stopReason() == StopReason.CALLBACK, "stop reason CALLBACK");
        check(c.newTokens() <= 1, "cancel stops within one token (" + c.newTokens() + ")");
        s.reset();
        Run again = generate(s, "And God said", eight);
        check(again.tokens.equals(a.tokens), "after a cancel the session generates the same again");

        // An exception in the callback stops generation and comes out of generate().
        s.reset();
        final RuntimeException boom = new IllegalStateException("boom");
        final int[] n = {0};
        Throwable t = thrown(() -> s.generate("And God said", eight, (piece, token) -> {
          if (++n[0] == 2) throw boom;
          return true;
        }));
        check(t == boom, "the callback's exception is rethrown by generate(): " + t);
        check(n[0] == 2, "no callback after the throwing one (" + n[0] + ")");
        s.reset();
        check(generate(s, "And God said", eight).tokens.equals(a.tokens),
            "the session is usable after a callback threw");

        // The callback may not re-enter its session.
        s.reset();
        t = thrown(() -> s.generate("And God said", eight, (piece, token) -> {
          s.reset();
          return true;
        }));
        check(t instanceof IllegalStateException && t.getMessage().contains("busy"),
            "reset() inside the callback throws IllegalStateException: " + t);
        for (String call : new String[] {"generate", "setSampling", "savePromptCache",
            "loadPromptCache", "position"}) {
          t = thrown(() -> s.generate("And God said", eight, (piece, token) -> {
            switch (call) {
              case "generate": s.generate("In the beginning", eight, null); break;
              case "setSampling": s.setSampling(Sampling.defaults().withSeed(3)); break;
              case "savePromptCache": s.savePromptCache("/nonexistent/edgellm-java.cache"); break;
              case "loadPromptCache": s.loadPromptCache("/nonexistent/edgellm-java.cache"); break;
              default: s.position(); break;
            }
            return true;
          }));
          check(t instanceof IllegalStateException && t.getMessage().contains("busy"),
              call + "() inside the callback throws IllegalStateException: " + t);
        }
        s.reset();
        check(generate(s, "And God said", eight).tokens.equals(a.tokens),
            "the session is unchanged by the refused calls from its callback");
        check(EdgellmException.Status.values()[10] == EdgellmException.Status.BUSY,
            "EDGELLM_ERR_BUSY (10) is Status.BUSY");

        // close() inside the callback stops the generation and frees the session when
        // generate() returns (the native free would otherwise pull the session from under it).
        try (Session doomed = model.newSession(greedy())) {
          final int[] pieces = {0};
          final boolean[] openInCallback = {false};
          GenerationStats closed = doomed.generate("And God said", eight, (piece, token) -> {
            ++pieces[0];
            doomed.close();
            openInCallback[0] = !doomed.isClosed();
            return true;
          });
          check(pieces[0] == 1 && closed.stopReason() == StopReason.CALLBACK,
              "close() in the callback stops after that piece (" + pieces[0] + ", "
                  + closed.stopReason() + ")");
          check(openInCallback[0] && doomed.isClosed(),
              "the session closes when generate() returns, not in the callback");
          t = thrown(doomed::position);
          check(t instanceof IllegalStateException && "Session is closed".equals(t.getMessage()),
              "use after the deferred close: " + t);
        }

        // A long generation: -Xcheck:jni reports local references that pile up per token.
        s.reset();
        Run longRun = generate(s, "In the beginning",
            GenerateOptions.defaults().withMaxNewTokens(200).withIgnoreEos(true)
                .withStopStrings(Arrays.asList("\uD83D\uDE00never", "\n\n\n\n")));
        check(longRun.tokens.size() >= 100, "200-token generation streams " + longRun.tokens.size());

        // Seeded sampling is reproducible.
        s.setSampling(Sampling.defaults().withSeed(42).withTemperature(0.9f));
        s.reset();
        Run r1 = generate(s, "And God said", eight);
        s.reset();
        Run r2 = generate(s, "And God said", eight);
        check(r1.tokens.equals(r2.tokens), "the same seed gives the same tokens");
        t = thrown(() -> s.setSampling(Sampling.defaults().withTemperature(-1f)));
        check(t instanceof EdgellmException
                && ((EdgellmException) t).status() == EdgellmException.Status.INVALID_ARGUMENT,
            "temperature -1 gives EdgellmException INVALID_ARGUMENT: " + t);
        t = thrown(() -> s.generate("And God said", GenerateOptions.defaults().withMaxNewTokens(0),
            null));
        check(t instanceof IllegalArgumentException, "maxNewTokens 0 is refused: " + t);
        t = thrown(() -> s.generate("a\u0000b", eight, null));
        check(t instanceof IllegalArgumentException, "a prompt with NUL is refused: " + t);

        // Prompt cache: save after a prompt, restore into a reset session.
        s.setSampling(Sampling.greedy());
        s.reset();
        GenerationStats p = s.generate("And God said, Let there be light", eight, null);
        File cache = File.createTempFile("edgellm-java-", ".cache");
        try {
          s.savePromptCache(cache.getPath());
          s.reset();
          long held = s.loadPromptCache(cache.getPath());
          check(held == p.promptTokens() && s.position() == held,
              "prompt cache restores " + held + " tokens (prompt " + p.promptTokens() + ")");
        } finally {
          cache.delete();
        }
        t = thrown(() -> s.loadPromptCache(dir + "/no-such-cache"));
        check(t instanceof EdgellmException && t.getMessage().contains("no-such-cache"),
            "a missing prompt cache names the file: " + t);
      }

      checkConstraints(model);

      // A context beyond the model's positions is refused.
      Throwable tooLong = thrown(() -> model.newSession(greedy().withContextSize(100000)));
      check(tooLong instanceof EdgellmException
              && ((EdgellmException) tooLong).status() == EdgellmException.Status.INVALID_ARGUMENT
              && tooLong.getMessage().contains("context_size: 100000")
              && tooLong.getMessage().contains("max_position_embeddings " + model.maxContext()),
          "contextSize 100000 is refused naming max_position_embeddings: " + tooLong);

      // Use after close, idempotent close.
      Session closed = model.newSession(greedy());
      closed.close();
      closed.close();
      Throwable t = thrown(closed::position);
      check(t instanceof IllegalStateException && "Session is closed".equals(t.getMessage()),
          "use after close: " + t);
      t = thrown(() -> closed.generate("x", eight, null));
      check(t instanceof IllegalStateException, "generate after close throws: " + t);

      // Two sessions over one model on two threads == the same one at a time.
      final String[] prompts = {"And God said", "In the beginning"};
      final GenerateOptions sixteen = eight.withMaxNewTokens(16);
      List<List<Integer>> serial = new ArrayList<>();
      for (String prompt : prompts) {
        try (Session s = model.newSession(greedy())) {
          serial.add(generate(s, prompt, sixteen).tokens);
        }
      }
      final List<List<Integer>> parallel = new ArrayList<>(Arrays.asList(null, null));
      final AtomicReference<Throwable> error = new AtomicReference<>();
      final CountDownLatch start = new CountDownLatch(1);
      Thread[] threads = new Thread[2];
      for (int i = 0; i < 2; ++i) {
        final int k = i;
        threads[i] = new Thread(() -> {
          try (Session s = model.newSession(greedy())) {
            start.await();
            List<Integer> tokens = generate(s, prompts[k], sixteen).tokens;
            synchronized (parallel) {
              parallel.set(k, tokens);
            }
          } catch (Throwable e) {
            error.set(e);
          }
        });
        threads[i].start();
      }
      start.countDown();
      for (Thread th : threads) th.join();
      check(error.get() == null, "two threads ran without error: " + error.get());
      check(serial.equals(parallel), "two threads give the same tokens as one at a time");

      // A session keeps the model alive after Model.close().
      Session survivor = model.newSession(greedy());
      model.close();
      t = thrown(model::vocabSize);
      check(t instanceof IllegalStateException && "Model is closed".equals(t.getMessage()),
          "model use after close: " + t);
      t = thrown(() -> model.newSession(greedy()));
      check(t instanceof IllegalStateException, "newSession after Model.close throws");
      check(generate(survivor, "And God said", eight).tokens.equals(serial.get(0).subList(0, 8)),
          "a session outlives its closed Model");
      survivor.close();
    }

    // Errors name what failed; the message crosses JNI as UTF-8.
    final String missing = dir + "-missing-\u00e9\uD83D\uDE00";
    Throwable t = thrown(() -> Model.load(missing));
    check(t instanceof EdgellmException && t.getMessage().contains(missing),
        "loading a missing dir gives EdgellmException naming it: " + t);
    if (t instanceof EdgellmException) {
      check(((EdgellmException) t).status() != EdgellmException.Status.OK, "status is not OK");
    }

    MemoryPlan plan = MemoryPlan.compute(dir, null, greedy());
    check(plan.peakBytes() > 0 && plan.contextSize() == 256, "memory plan: " + plan);
    t = thrown(() -> MemoryPlan.compute(missing, null, null));
    check(t instanceof EdgellmException, "memory plan of a missing dir fails: " + t);
    // A budget just under the defaults' peak: something changes, the plan fits and says what.
    MemoryPlan given = MemoryPlan.compute(dir, null, null);
    MemoryPlan.Fit fit = MemoryPlan.fitBudget(dir, given.peakBytes() - 1, null, null);
    check(fit.plan.peakBytes() < given.peakBytes() && fit.note.contains("to fit the budget"),
        "fitBudget under the defaults' peak: " + fit.plan + " " + fit.note);
    MemoryPlan again = MemoryPlan.compute(dir, fit.modelOptions, fit.sessionOptions);
    check(again.peakBytes() == fit.plan.peakBytes(), "the chosen options plan the same: " + again);
    MemoryPlan.Fit phone = MemoryPlan.fitBudget(dir, MemoryPlan.BUDGET_PHONE, null, null);
    check(phone.note.isEmpty() && phone.plan.peakBytes() == given.peakBytes(),
        "the phone profile holds the bundled model as given: " + phone.note);
    t = thrown(() -> MemoryPlan.fitBudget(dir, 1 << 20, null, null));
    check(t instanceof EdgellmException
            && ((EdgellmException) t).status() == EdgellmException.Status.OUT_OF_MEMORY
            && t.getMessage().contains("nothing fits"),
        "fitBudget of 1 MiB fails with OUT_OF_MEMORY: " + t);

    checkCleaner(dir);

    System.out.printf("%d failure(s), %.2f s%n", failures, (System.nanoTime() - t0) / 1e9);
    System.exit(failures == 0 ? 0 : 1);
  }

  /** Constrained decoding: choices, a JSON Schema, errors, and back to free text. */
  private static void checkConstraints(Model model) {
    final String[] choices = {"light", "darkness", "the waters"};
    final GenerateOptions sixteen = GenerateOptions.defaults().withMaxNewTokens(16);
    try (Session s = model.newSession(greedy())) {
      Throwable t = thrown(s::constraintResult);
      check(t instanceof EdgellmException && t.getMessage().contains("not constrained"),
          "constraintResult() before a constrained generation throws: " + t);
      try (Constraint c = Constraint.choices(choices)) {
        check(c.kind() == Constraint.Kind.CHOICES, "kind() == CHOICES");
        s.setConstraint(c);
      } // closed at once: the session keeps its own reference
      Run r = generate(s, "And God said, Let there be", sixteen);
      ConstraintResult cr = s.constraintResult();
      check(Arrays.asList(choices).contains(r.text.toString()) && cr.complete()
              && r.stats.stopReason() == StopReason.EOS,
          "choices: the output is one of them: \"" + r.text + "\" " + cr);
      t = thrown(() -> s.generate("And God said", sixteen.withIgnoreEos(true), null));
      check(t instanceof EdgellmException && t.getMessage().contains("ignore_eos"),
          "ignoreEos under a constraint is refused: " + t);

      String schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
          + "\"maxLength\":12},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},"
          + "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
      try (Constraint c = Constraint.jsonSchema(schema)) {
        s.setConstraint(c);
      }
      // JSON may have whitespace around it.
      String json = generate(s, "And God said", sixteen.withMaxNewTokens(48)).text.toString().trim();
      cr = s.constraintResult();
      check(cr.complete() && json.startsWith("{") && json.endsWith("}")
              && json.contains("\"name\"") && json.contains("\"age\""),
          "JSON Schema: a whole object: " + json + " " + cr);

      t = thrown(() -> Constraint.jsonSchema("{\"type\":\"object\",\"not\":{}}"));
      check(t instanceof EdgellmException
              && ((EdgellmException) t).status() == EdgellmException.Status.UNSUPPORTED
              && t.getMessage().contains("\"not\""),
          "a schema keyword not handled is named: " + t);
      t = thrown(() -> Constraint.grammar("root ::= ("));
      check(t instanceof EdgellmException && t.getMessage().contains("source: "),
          "a grammar that does not parse is refused: " + t);
      t = thrown(() -> Constraint.choices());
      check(t instanceof IllegalArgumentException, "no choices is refused: " + t);
      Constraint closed = Constraint.regex("[0-9]+");
      closed.close();
      t = thrown(() -> s.setConstraint(closed));
      check(t instanceof IllegalStateException, "setConstraint(closed) throws: " + t);

      s.setConstraint(null);
      s.reset();
      GenerateOptions eight = GenerateOptions.defaults().withMaxNewTokens(8).withIgnoreEos(true);
      Run free = generate(s, "And God said", eight);
      try (Session plain = model.newSession(greedy())) {
        check(free.tokens.equals(generate(plain, "And God said", eight).tokens),
            "setConstraint(null) returns to free text");
      }
    }
  }

  /** A Session and a Model never closed: the Cleaner frees them and logs a warning each. */
  private static void checkCleaner(String dir) throws InterruptedException {
    final List<String> warnings = new ArrayList<>();
    Logger log = Logger.getLogger("dev.edgellm");
    log.setUseParentHandlers(false); // keep the expected warnings off stderr
    Handler h = new Handler() {
      @Override public void publish(LogRecord r) {
        synchronized (warnings) {
          warnings.add(r.getMessage());
        }
      }
      @Override public void flush() {}
      @Override public void close() {}
    };
    log.addHandler(h);
    leakOne(dir);
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (System.nanoTime() < deadline) {
      System.gc();
      synchronized (warnings) {
        if (warnings.size() >= 2) break;
      }
      Thread.sleep(20);
    }
    log.removeHandler(h);
    String all;
    synchronized (warnings) {
      all = String.join(" | ", warnings);
    }
    check(all.contains("Session was never closed") && all.contains("Model was never closed"),
        "the Cleaner frees unclosed handles and logs: " + all);
  }

  private static void leakOne(String dir) {
    Model m = Model.load(dir);
    Session s = m.newSession(greedy());
    s.generate("And God said", GenerateOptions.defaults().withMaxNewTokens(2), null);
  }
}
