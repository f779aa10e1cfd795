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

/**
 * Whether the holders were all inside their locks at once: each, inside, waits for all the others to
 * enter, at most `ms`. Holders that may run together always meet, however slow the machine. An
 * exclusive lock keeps the others out until the wait runs out, and then this says false.
 */
async function allInsideAtOnce(locks: Array<(fn: () => Promise<boolean>) => Promise<boolean>>, ms = 30_000): Promise<boolean> {
  let inside = 0;
  let allIn!: () => void;
  const met = new Promise<void>((resolve) => (allIn = resolve));
  const entered = await Promise.all(locks.map((lock) => lock(async () => {
    if (++inside === locks.length) allIn();
    let timer: NodeJS.Timeout | undefined;
    const ranOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
    try {
      return await Promise.race([met.then(() => true), ranOut]);
    } finally {
      clearTimeout(timer);
    }
  })));
  return entered.every(Boolean);
}

test("the PostgreSQL lock excludes holders on other pools, not other threads; a dead session's lock is freed", async () => {
  const pools = [new pg.Pool({ connectionString: POSTGRES_URL() }), new pg.Pool({ connectionString: POSTGRES_URL() })];
  try {
    const [a, b] = pools.map((pool) => postgresThreadLock(pool));
    const same = await holders([(fn) => a!("thread-x", fn), (fn) => b!("thread-x", fn), (fn) => a!("thread-x", fn)]);
    assert.ok(exclusive(same), same.join(", "));
    assert.ok(await allInsideAtOnce([(fn) => a!("thread-y", fn), (fn) => b!("thread-z", fn)]), "different threads run at once");
    // The check's control: holders of one thread on two pools never meet.
    assert.equal(await allInsideAtOnce([(fn) => a!("thread-x", fn), (fn) => b!("thread-x", fn)], 300), false);

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
  assert.ok(await allInsideAtOnce([(fn) => localThreadLock("t1", fn), (fn) => localThreadLock("t2", fn)]));
  assert.equal(await allInsideAtOnce([(fn) => localThreadLock("t", fn), (fn) => localThreadLock("t", fn)], 300), false);
  await assert.rejects(localThreadLock("t", async () => { throw new Error("boom"); }), /boom/);
  assert.equal(await localThreadLock("t", async () => "free again"), "free again");
});
