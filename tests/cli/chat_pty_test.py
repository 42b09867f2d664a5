#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# edgellm-generate -i on a pseudo-terminal, as a user at a terminal has it: Ctrl-C during an
# answer stops that answer and the prompt comes back (the next turn works); a small --context
# fills and the chat goes on after dropping the oldest turns (a note on stderr); Ctrl-C at the
# prompt ends the chat with exit 0 and its totals. Every wait is bounded.
#   chat_pty_test.py GENERATE_BIN SOURCE_DIR
import os
import pty
import re
import select
import signal
import sys
import time

BIN, SRC = sys.argv[1], sys.argv[2]
MODEL = os.path.join(SRC, "models", "kjv-target-awq")
failures = 0


def ok(name):
    print(f"ok   {name}", flush=True)


def fail(name, out=""):
    global failures
    failures += 1
    print(f"FAIL {name}", flush=True)
    for line in out.splitlines()[-20:]:
        print(f"     {line}", flush=True)


class Chat:
    """edgellm-generate on a pty: stdin, stdout and stderr are its terminal."""

    def __init__(self, *args):
        self.out = b""
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execv(BIN, [BIN, "-m", MODEL, *args])
            finally:
                os._exit(127)

    def text(self, since=0):
        return self.out[since:].decode("utf-8", "replace")

    def read_until(self, pattern, since=0, timeout=30.0):
        """Reads until `pattern` (a regex) is in the output after offset `since`; True if so."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text(since)):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # EIO: the child closed its terminal
                    chunk = b""
                if not chunk:
                    return bool(re.search(pattern, self.text(since)))
                self.out += chunk
        return True

    def send(self, data):
        os.write(self.fd, data)

    def wait(self, timeout=30.0):
        """The exit status, or None (the child is killed) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read_until(r"(?!x)x", len(self.out), timeout=0.1)  # drain the output
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        return None


STATS = r"\[\d+ prompt tokens \(\d+ cached, \d+ prefilled\), \d+ generated; stop: "

# Ctrl-C during an answer, the next turn, then Ctrl-C at the prompt.
c = Chat("-i", "-n", "200", "--ignore-eos")
if not c.read_until(r"> $", timeout=60):
    fail("chat: the prompt appears", c.text())
else:
    mark = len(c.out)
    c.send(b"Who is the LORD?\r")
    # The echoed line, then some text of the answer.
    if c.read_until(r"LORD\?\r?\n\S.{20}", mark, timeout=30):
        c.send(b"\x03")
        if c.read_until(STATS + r"stopped by caller.*\n.*\n(.*\n)?> $", mark, timeout=30):
            ok("chat: Ctrl-C stops the answer and the prompt comes back")
        else:
            fail("chat: Ctrl-C during an answer", c.text(mark))
        mark = len(c.out)
        c.send(b"And then?\r")
        if c.read_until(STATS + r".*\n.*\n> $", mark, timeout=60):
            ok("chat: the turn after a Ctrl-C answers")
        else:
            fail("chat: the turn after a Ctrl-C", c.text(mark))
    else:
        fail("chat: an answer streams", c.text(mark))
    mark = len(c.out)
    c.send(b"\x03")
    rc = c.wait(30)
    if rc == 0 and re.search(r"\[chat ended: \d+ answers?;", c.text(mark)):
        ok("chat: Ctrl-C at the prompt exits 0 with the totals")
    else:
        fail(f"chat: Ctrl-C at the prompt (exit {rc})", c.text(mark))

# A context of 96 tokens fills in the first turns: the oldest are dropped and the chat goes on.
c = Chat("-i", "-n", "200", "-c", "96", "--ignore-eos", "--system", "Speak as the KJV.")
line = b"And it came to pass in those days that the king spake unto the people of the land\r"
answered = 0
mark = 0
for turn in range(4):
    if not c.read_until(r"> $", mark, timeout=60):
        break
    mark = len(c.out)
    c.send(line)
    if c.read_until(STATS + r".*\n.*\n", mark, timeout=60):
        answered += 1
out = c.text()
c.send(b"\x04")  # end of input
rc = c.wait(30)
if answered == 4 and rc == 0 and "context full: dropped the oldest" in out:
    ok("chat: a full context drops the oldest turns and goes on (4 turns in -c 96)")
else:
    fail(f"chat: a full context ({answered} turns answered, exit {rc})", c.text())

print(f"{failures} failure(s)" if failures else "all passed")
sys.exit(1 if failures else 0)
