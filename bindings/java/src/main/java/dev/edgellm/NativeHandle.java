// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

import java.lang.ref.Cleaner;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.LongConsumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * One native handle owned by a Java object (its owner): freed by close(), or by the Cleaner
 * when the owner became unreachable without close(), which logs a leak warning.
 *
 * <p>Calls hold the read lock for as long as native code uses the handle; freeing takes the
 * write lock. So close() on one thread waits for another thread's call on a shared Model to
 * finish, and the Cleaner cannot free a handle under a call still running (the owner may become
 * unreachable while its last native call runs).
 */
final class NativeHandle {
  // One daemon thread for the whole library. java.util.logging rather than System.Logger:
  // Android has the former (it goes to logcat) but not the latter.
  private static final Cleaner CLEANER = Cleaner.create();
  static final Logger LOG = Logger.getLogger("dev.edgellm");

  private final State state;
  private final Cleaner.Cleanable cleanable;

  NativeHandle(Object owner, String kind, long handle, LongConsumer free) {
    this.state = new State(kind, handle, free);
    this.cleanable = CLEANER.register(owner, state);
  }

  /** The handle, read-locked until release(); throws if closed. */
  long acquire() {
    state.lock.readLock().lock();
    long h = state.handle;
    if (h == 0) {
      state.lock.readLock().unlock();
      throw new IllegalStateException(state.kind + " is closed");
    }
    return h;
  }

  void release() {
    state.lock.readLock().unlock();
  }

  boolean isClosed() {
    return state.handle == 0;
  }

  /** Frees the handle now; later calls are no-ops. */
  void close() {
    state.explicit = true;
    cleanable.clean();
  }

  // Must not refer to the owner, or the owner would never become unreachable.
  private static final class State implements Runnable {
    final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    final String kind;
    final LongConsumer free;
    volatile long handle;
    volatile boolean explicit;

    State(String kind, long handle, LongConsumer free) {
      this.kind = kind;
      this.handle = handle;
      this.free = free;
    }

    @Override
    public void run() {
      lock.writeLock().lock();
      try {
        long h = handle;
        if (h == 0) return;
        handle = 0;
        if (!explicit) {
          LOG.log(Level.WARNING, "edgellm: a " + kind + " was never closed; freeing its native "
              + "memory from the Cleaner (call close() or use try-with-resources)");
        }
        free.accept(h);
      } finally {
        lock.writeLock().unlock();
      }
    }
  }
}
