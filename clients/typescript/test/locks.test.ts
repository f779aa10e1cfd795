/** The per-thread locks: the Python client's advisory key, and a PostgreSQL lock that excludes other pools (other processes). */
import assert from "node:assert/strict";
import { test } from "node:test";

import pg from "pg";

import { advisoryKey, localThreadLock, postgresThreadLock } from "../src/index.ts";
import { POSTGRES_URL, env } from "./support.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test("the advisory key of a thread is the Python client's (so Python and TypeScript replicas exclude each other)", () => {
  const vectors = JSON.parse(env("RQ_ADVISORY_VECTORS")) as Record<string, string>;
  assert.ok(Object.keys(vectors).length >= 3);
  for (const [threadId, key] of Object.entries(vectors)) assert.equal(advisoryKey(threadId).toString(), key, threadId);
});

/** Each holder of the lock logs its start and end; overlapping holders interleave them. */
async function holders(locks: Array<(fn: () => Promise<void>) => Promise<void>>): Promise<string[]> {
  const log: string[] = [];
  await Promise.all(locks.map((lock, n) => lock(async () => {
    log.push(`start ${n}`);
    await sleep(150);
    log.push(`end ${n}`);
  })));
  return log;
}

function exclusive(log: string[]): boolean {
  return log.every((entry, i) => (i % 2 === 0 ? entry.startsWith("start") : entry === `end ${log[i - 1]!.split(" ")[1]}`));
}

test("the PostgreSQL lock excludes holders on other pools, not other threads; a dead session's lock is freed", async () => {
  const pools = [new pg.Pool({ connectionString: POSTGRES_URL() }), new pg.Pool({ connectionString: POSTGRES_URL() })];
  try {
    const [a, b] = pools.map((pool) => postgresThreadLock(pool));
    const same = await holders([(fn) => a!("thread-x", fn), (fn) => b!("thread-x", fn), (fn) => a!("thread-x", fn)]);
    assert.ok(exclusive(same), same.join(", "));
    const other = await holders([(fn) => a!("thread-y", fn), (fn) => b!("thread-z", fn)]);
    assert.ok(!exclusive(other), "different threads run at once: " + other.join(", "));

    // A holder that fails lets go: its error is the caller's, and the lock is free for another pool.
    await assert.rejects(a!("thread-e", async () => { throw new Error("tool failed"); }), /tool failed/);
    assert.equal(await b!("thread-e", async () => "taken"), "taken");

    // A holder whose session dies (its process killed) frees the lock with its connection.
    const doomed = new pg.Client({ connectionString: POSTGRES_URL() });
    await doomed.connect();
    doomed.on("error", () => {});
    await doomed.query("SELECT pg_advisory_lock($1::bigint)", [advisoryKey("thread-k").toString()]);
    const { rows: [{ pid: doomedPid }] } = await doomed.query("SELECT pg_backend_pid() AS pid");
    let got = false;
    const waiting = b!("thread-k", async () => {
      got = true;
    });
    await sleep(200);
    assert.equal(got, false, "held by the other session");
    // That session's backend alone: the machine's other databases (a test run beside this one) hold advisory locks too.
    await pools[0]!.query("SELECT pg_terminate_backend($1)", [doomedPid]);
    await waiting;
    assert.equal(got, true);
  } finally {
    await Promise.all(pools.map((pool) => pool.end()));
  }
});

test("the local lock serialises one thread's holders and lets others run", async () => {
  assert.ok(exclusive(await holders([0, 1, 2].map(() => (fn) => localThreadLock("t", fn)))));
  assert.ok(!exclusive(await holders([(fn) => localThreadLock("t1", fn), (fn) => localThreadLock("t2", fn)])));
  await assert.rejects(localThreadLock("t", async () => { throw new Error("boom"); }), /boom/);
  assert.equal(await localThreadLock("t", async () => "free again"), "free again");
});
