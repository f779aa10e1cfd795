/**
 * Per-thread locks for resuming an agent exactly once: in one process, or across every process that
 * shares a PostgreSQL checkpointer.
 *
 * A `ThreadLock` runs `fn` holding the lock of `threadId`. The glue's check-then-resume holds it while
 * it re-reads the thread's pending interrupts and resumes; it must exclude every process that resumes
 * from the same checkpointer, so `checkpointerThreadLock` picks the one the checkpointer can share:
 *
 * - LangGraph.js's `PostgresSaver` (any checkpointer with a `pg` pool): a PostgreSQL session advisory lock keyed by the thread id, taken
 *   with `pg_try_advisory_lock` on a connection of the checkpointer's own pool, held for the resume
 *   (give the pool room for one more connection per concurrent resume). The key is the Python
 *   client's (`reviewqueue_client.locks`), so Python and TypeScript replicas exclude each other; a
 *   replica that dies holding it releases it with its connection.
 * - anything else (`MemorySaver`): a lock in this process, all such a checkpointer is shared by.
 */

export type ThreadLock = <T>(threadId: string, fn: () => Promise<T>) => Promise<T>;

/** What the PostgreSQL lock needs of a pool: `pg.Pool`'s `connect()` and its clients' `query` and `release`. */
export interface PoolLike {
  connect(): Promise<{ query(sql: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>; release(error?: Error | boolean): void }>;
}

const ADVISORY_POLL_MS = 20; // between tries of a held advisory lock (a resume holds it for a graph step)
const queues = new Map<string, Promise<unknown>>();

/** One lock per thread id in this process: enough for a single agent process. */
export const localThreadLock: ThreadLock = async (threadId, fn) => {
  const before = queues.get(threadId) ?? Promise.resolve();
  let release!: () => void;
  const mine = new Promise<void>((resolve) => (release = resolve));
  const tail = before.then(() => mine);
  queues.set(threadId, tail);
  await before;
  try {
    return await fn();
  } finally {
    release();
    if (queues.get(threadId) === tail) queues.delete(threadId);
  }
};

/** A per-thread lock across every process on `pool`'s PostgreSQL database (a session advisory lock). */
export function postgresThreadLock(pool: PoolLike): ThreadLock {
  return (threadId, fn) =>
    // This process's resumes queue here first: one connection each, and none waits on its own session.
    localThreadLock(`pg:${threadId}`, async () => {
      const key = advisoryKey(threadId).toString();
      const client = await pool.connect();
      let broken: Error | undefined; // a session whose query failed is closed, not pooled: its lock goes with it
      const query = (sql: string) =>
        client.query(sql, [key]).catch((error: Error) => {
          broken = error;
          throw error;
        });
      try {
        while (!(await query("SELECT pg_try_advisory_lock($1::bigint) AS locked")).rows[0]?.locked) {
          await new Promise((resolve) => setTimeout(resolve, ADVISORY_POLL_MS));
        }
        try {
          return await fn();
        } finally {
          await query("SELECT pg_advisory_unlock($1::bigint)").catch(() => undefined);
        }
      } finally {
        client.release(broken);
      }
    });
}

/** The lock every process sharing `checkpointer` sees (the module's comment): one with a `pg` pool gets the advisory lock. */
export function checkpointerThreadLock(checkpointer: unknown): ThreadLock {
  const pool = (checkpointer as { pool?: Partial<PoolLike> } | null | undefined)?.pool;
  return typeof pool?.connect === "function" ? postgresThreadLock(pool as PoolLike) : localThreadLock;
}

/** The advisory lock key of a thread: BLAKE2b-64 of "reviewqueue_client:<thread id>", big-endian, signed (the Python client's). */
export function advisoryKey(threadId: string): bigint {
  const digest = blake2b(new TextEncoder().encode(`reviewqueue_client:${threadId}`), 8);
  let value = 0n;
  for (const byte of digest) value = (value << 8n) | BigInt(byte);
  return BigInt.asIntN(64, value);
}

// BLAKE2b (RFC 7693), unkeyed, on BigInt words: Node's crypto has only its 64-byte digest, and the
// Python client's key is the 8-byte one (a different parameter block, so not a prefix of it).
const MASK = (1n << 64n) - 1n;
const IV = [
  0x6a09e667f3bcc908n, 0xbb67ae8584caa73bn, 0x3c6ef372fe94f82bn, 0xa54ff53a5f1d36f1n,
  0x510e527fade682d1n, 0x9b05688c2b3e6c1fn, 0x1f83d9abfb41bd6bn, 0x5be0cd19137e2179n,
];
const SIGMA = [
  [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
  [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
  [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
  [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
  [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
  [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
  [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
  [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
  [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
  [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
];

function rotr(x: bigint, n: bigint): bigint {
  return ((x >> n) | (x << (64n - n))) & MASK;
}

function compress(h: bigint[], block: Uint8Array, counter: bigint, last: boolean): void {
  const m = Array.from({ length: 16 }, (_, i) => {
    let word = 0n;
    for (let b = 7; b >= 0; b--) word = (word << 8n) | BigInt(block[i * 8 + b]!);
    return word;
  });
  const v = [...h, ...IV];
  v[12] = v[12]! ^ (counter & MASK);
  v[13] = v[13]! ^ (counter >> 64n);
  if (last) v[14] = v[14]! ^ MASK;
  const g = (a: number, b: number, c: number, d: number, x: bigint, y: bigint) => {
    v[a] = (v[a]! + v[b]! + x) & MASK;
    v[d] = rotr(v[d]! ^ v[a]!, 32n);
    v[c] = (v[c]! + v[d]!) & MASK;
    v[b] = rotr(v[b]! ^ v[c]!, 24n);
    v[a] = (v[a]! + v[b]! + y) & MASK;
    v[d] = rotr(v[d]! ^ v[a]!, 16n);
    v[c] = (v[c]! + v[d]!) & MASK;
    v[b] = rotr(v[b]! ^ v[c]!, 63n);
  };
  for (let round = 0; round < 12; round++) {
    const s = SIGMA[round % 10]!;
    const w = (i: number) => m[s[i]!]!;
    g(0, 4, 8, 12, w(0), w(1));
    g(1, 5, 9, 13, w(2), w(3));
    g(2, 6, 10, 14, w(4), w(5));
    g(3, 7, 11, 15, w(6), w(7));
    g(0, 5, 10, 15, w(8), w(9));
    g(1, 6, 11, 12, w(10), w(11));
    g(2, 7, 8, 13, w(12), w(13));
    g(3, 4, 9, 14, w(14), w(15));
  }
  for (let i = 0; i < 8; i++) h[i] = h[i]! ^ v[i]! ^ v[i + 8]!;
}

/** BLAKE2b of `data` with a digest of `size` bytes (1..64), unkeyed. */
export function blake2b(data: Uint8Array, size: number): Uint8Array {
  const h = [...IV];
  h[0] = h[0]! ^ BigInt(0x01010000 ^ size);
  const blocks = Math.max(1, Math.ceil(data.length / 128));
  for (let i = 0; i < blocks; i++) {
    const block = new Uint8Array(128);
    block.set(data.subarray(i * 128, (i + 1) * 128));
    const last = i === blocks - 1;
    compress(h, block, BigInt(last ? data.length : (i + 1) * 128), last);
  }
  const out = new Uint8Array(64);
  h.forEach((word, i) => {
    for (let b = 0; b < 8; b++) out[i * 8 + b] = Number((word >> BigInt(8 * b)) & 0xffn);
  });
  return out.slice(0, size);
}
