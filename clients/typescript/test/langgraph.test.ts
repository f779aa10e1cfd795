/**
 * The LangGraph.js glue with a LangChain.js agent (createAgent + humanInTheLoopMiddleware) against a real
 * server: its tool call forwarded as an ask, edited by a moderator, resumed once; and replicas sharing a
 * PostgreSQL checkpointer racing to resume run it once, while the naive control (no lock) runs it again.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import { MemorySaver } from "@langchain/langgraph";

import { ReviewQueue } from "../src/index.ts";
import { type ThreadLock, decisionWaitResume, interruptsForward, itemResume } from "../src/langgraph.ts";
import { PROPOSED, agentBuild } from "./agent.ts";
import { POSTGRES_URL, SERVER, TOKEN, moderatorDecide, unique } from "./support.ts";

const reviews = () => new ReviewQueue(SERVER(), TOKEN());
const EDITED = { customer_id: "C-7", grace_days: 14 };
const EDIT = [{ type: "edit", edited_action: { name: "delete_customer", args: EDITED } }];
const noLock: ThreadLock = (_threadId, fn) => fn(); // the negative control

/** Its first `parties` callers wait until all of them have come; later callers pass. */
function meeting(parties: number): () => Promise<void> {
  let arrived = 0;
  let release!: () => void;
  const all = new Promise<void>((resolve) => (release = resolve));
  return async () => {
    arrived += 1;
    if (arrived > parties) return;
    if (arrived === parties) release();
    await all;
  };
}

/** `agent`, its `invoke` waiting for `gate` first (called only past the resume's check). */
function invokeGated<T extends { invoke: (...args: any[]) => Promise<any> }>(agent: T, gate: () => Promise<void>): T {
  return new Proxy(agent, {
    get(target, key) {
      const value = Reflect.get(target, key, target);
      if (key === "invoke") return async (...args: unknown[]) => (await gate(), target.invoke(...args));
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

async function started(agent: ReturnType<typeof agentBuild>, threadId: string) {
  await agent.invoke({ messages: [{ role: "user", content: "Please delete customer C-7." }] }, { configurable: { thread_id: threadId } });
}

describe("one agent", () => {
  test("its tool call is asked in the API's shape, edited, resumed once with the edit, and reported done", async () => {
    const runs: unknown[] = [];
    const agent = agentBuild({ checkpointer: new MemorySaver(), ran: (args) => runs.push(args) });
    const threadId = unique("thread");
    await started(agent, threadId);
    const [item] = await interruptsForward(reviews(), agent, { threadId, source: "ts-agent" });
    assert.equal(item!.title, "Approve delete_customer");
    const [ask] = item!.asks;
    // The middleware's description without the call it appends (shown beside it on the item's page).
    assert.deepEqual(ask!.action_requests, [{ name: "delete_customer", args: PROPOSED, description: "Tool execution requires approval" }]);
    assert.deepEqual(ask!.review_configs, [{ action_name: "delete_customer", allowed_decisions: ["approve", "edit", "reject"] }]);
    assert.equal(item!.external?.thread_id, threadId);
    const [again] = await interruptsForward(reviews(), agent, { threadId, source: "ts-agent" });
    assert.equal(again!.id, item!.id, "forwarding again is the same item");

    const resuming = decisionWaitResume(reviews(), agent, { itemId: item!.id, timeout: 60 });
    await moderatorDecide(item!.id, EDIT);
    const resumed = await resuming;
    assert.equal(resumed.resumed, true);
    assert.equal(resumed.reported, true);
    assert.deepEqual(runs, [EDITED]);
    const decided = await reviews().read(item!.id);
    assert.deepEqual(decided.resume, { decisions: EDIT });
    assert.deepEqual(decided.outcome && [decided.outcome.status, decided.outcome.message], ["done", "done"]);
    assert.equal((await itemResume(agent, decided, { client: reviews() })).resumed, false, "a second resume is a no-op");
    assert.deepEqual(runs, [EDITED]);
  });

  test("a rejected call never runs its tool", async () => {
    const runs: unknown[] = [];
    const agent = agentBuild({ checkpointer: new MemorySaver(), ran: (args) => runs.push(args) });
    const threadId = unique("thread");
    await started(agent, threadId);
    const [item] = await interruptsForward(reviews(), agent, { threadId, source: "ts-agent" });
    await moderatorDecide(item!.id, [{ type: "reject", message: "not this customer" }]);
    const resumed = await itemResume(agent, await reviews().read(item!.id), { client: reviews() });
    assert.equal(resumed.resumed, true);
    assert.deepEqual([runs, resumed.errors], [[], []]);
  });
});

describe("replicas sharing a PostgreSQL checkpointer", () => {
  const savers: PostgresSaver[] = [];
  before(async () => {
    for (let n = 0; n < 2; n++) savers.push(PostgresSaver.fromConnString(POSTGRES_URL()));
    await savers[0]!.setup();
  });
  after(async () => {
    await Promise.all(savers.map((saver) => saver.end()));
  });

  /** Two replicas (agents on their own pools) each resume the decided thread twice at once (duplicate deliveries).
   * The naive control's four resumes start once all have passed the check, and its first two tool runs wait
   * for each other, so neither saves its step before the other has loaded the thread: certain, not timed. */
  async function race(threadLock: ThreadLock | undefined): Promise<unknown[]> {
    const runs: unknown[] = [];
    const naive = threadLock === noLock;
    const entered = naive ? meeting(2) : undefined;
    const replicas = savers.map((checkpointer) => agentBuild({ checkpointer, ran: (args) => runs.push(args), toolMs: 300, entered }));
    const threadId = unique("replicated");
    await started(replicas[0]!, threadId);
    const [item] = await interruptsForward(reviews(), replicas[1]!, { threadId, source: "ts-agent" });
    await moderatorDecide(item!.id, EDIT);
    const decided = await reviews().read(item!.id);
    const checked = naive ? meeting(4) : undefined;
    const resumed = await Promise.all(
      [...replicas, ...replicas].map((agent) =>
        itemResume(checked ? invokeGated(agent, checked) : agent, decided, { client: reviews(), threadLock }),
      ),
    );
    if (threadLock === undefined) assert.equal(resumed.filter((r) => r.resumed).length, 1);
    return runs;
  }

  test("the tool runs once, with the edit", async () => {
    assert.deepEqual(await race(undefined), [EDITED]);
  });

  test("the naive control (no lock) runs it more than once: the race is real", async () => {
    const runs = await race(noLock);
    assert.ok(runs.length > 1, JSON.stringify(runs));
  });
});
