// SPDX-License-Identifier: Apache-2.0
package dev.edgellm.test;

import dev.edgellm.Constraint;
import dev.edgellm.GenerateOptions;
import dev.edgellm.Model;
import dev.edgellm.Sampling;
import dev.edgellm.Session;
import dev.edgellm.SessionOptions;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * 100 cycles of load / new session / generate / constrained generate / close: the anonymous
 * resident set (RssAnon: heap and native allocations, not the mmapped model's pages, which the
 * kernel may drop under memory pressure from other processes) after the last cycle must not
 * exceed its value after the first by more than 5 MB (native memory is released on close, not
 * at some later GC).
 * Usage: LeakTest MODEL_DIR [CYCLES]
 */
public final class LeakTest {
  private LeakTest() {}

  /** RssAnon of this process in bytes (Linux /proc). */
  static long rssBytes() throws IOException {
    for (String line : Files.readAllLines(Paths.get("/proc/self/status"), StandardCharsets.UTF_8)) {
      if (line.startsWith("RssAnon:")) {
        return Long.parseLong(line.substring(8).trim().split("\\s+")[0]) * 1024;
      }
    }
    throw new IOException("no RssAnon in /proc/self/status");
  }

  public static void main(String[] args) throws IOException {
    String dir = args[0];
    int cycles = args.length > 1 ? Integer.parseInt(args[1]) : 100;
    SessionOptions so = SessionOptions.defaults().withSampling(Sampling.greedy()).withContextSize(256);
    GenerateOptions go = GenerateOptions.defaults().withMaxNewTokens(4);
    long t0 = System.nanoTime();
    long first = 0;
    long last = 0;
    int pieces = 0;
    for (int i = 1; i <= cycles; ++i) {
      try (Model m = Model.load(dir); Session s = m.newSession(so)) {
        pieces += s.generateText("And God said", go).isEmpty() ? 0 : 1;
        try (Constraint c = Constraint.choices("light", "darkness")) {
          s.setConstraint(c);
        }
        pieces += s.generateText("And God said, Let there be", go).isEmpty() ? -1 : 0;
      }
      last = rssBytes();
      if (i == 1) first = last;
      if (i == 1 || i % 25 == 0) System.out.printf("cycle %3d: RssAnon %.1f MB%n", i, last / 1e6);
    }
    double growthMb = (last - first) / 1e6;
    boolean ok = last - first <= 5_000_000L && pieces == cycles;
    System.out.printf("%s %d cycles: RssAnon %+.2f MB from cycle 1 to %d (limit 5 MB), %.2f s%n",
        ok ? "ok  " : "FAIL", cycles, growthMb, cycles, (System.nanoTime() - t0) / 1e9);
    System.exit(ok ? 0 : 1);
  }
}
