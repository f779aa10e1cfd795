/**
 * A LangChain.js agent service in its own Node process, as a customer runs it (e2e/test_typescript_agent.py):
 * test/agent.ts's agent on a PostgresSaver (RQ_POSTGRES_URL: replicas share it), a small HTTP server whose
 * `POST /hooks` hands reviewqueue's webhooks to `WebhookResumer`, and `@reviewqueue/client` only.
 *
 * It says what the Python agent services say (e2e/remote_agent.py): `serving` once it listens,
 * `ready [...]` once reconciled (its ask forwarded, a decision already made resumed), `resumed
 * true|false` per webhook acted on, `received` (with `--hold`); each run of its tool appends its
 * arguments to `effects.jsonl` in `--dir`. Flags: `--slow-resume S` (each resume starts S seconds
 * after the check that allowed it), `--tool-seconds S`, `--naive` (no per-thread lock: the negative
 * control), `--hold` (a decision it is sent takes the thread's lock and is never acted on: the
 * moment to kill it, mid-resume).
 *
 * REVIEWQUEUE_URL, REVIEWQUEUE_TOKEN and REVIEWQUEUE_WEBHOOK_SECRET come from the environment.
 */
import { appendFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";

import { ReviewQueue, WebhookInvalid } from "../src/index.ts";
import { type Resumable, type ThreadLock, WebhookResumer, checkpointerThreadLock, interruptsReconcile } from "../src/langgraph.ts";
import { agentBuild } from "./agent.ts";

const { values: args } = parseArgs({
  options: {
    port: { type: "string" },
    dir: { type: "string" },
    thread: { type: "string", default: "support-thread-1" },
    "slow-resume": { type: "string", default: "0" },
    "tool-seconds": { type: "string", default: "0" },
    naive: { type: "boolean", default: false },
    hold: { type: "boolean", default: false },
  },
});
const say = (...words: string[]) => process.stdout.write(words.join(" ") + "\n");
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const checkpointer = PostgresSaver.fromConnString(process.env.RQ_POSTGRES_URL!);
await checkpointer.setup();
const agent = agentBuild({
  checkpointer,
  toolMs: Number(args["tool-seconds"]) * 1000,
  ran: (ran) => appendFileSync(join(args.dir!, "effects.jsonl"), JSON.stringify(ran) + "\n"),
});
const config = { configurable: { thread_id: args.thread! } };
if (!Object.keys((await agent.graph.getState(config)).values ?? {}).length) {
  await agent.invoke({ messages: [{ role: "user", content: "Please delete customer C-7." }] }, config);
}
const slow = Number(args["slow-resume"]) * 1000;
const resumable: Resumable = {
  graph: agent.graph,
  invoke: async (input, options) => {
    await sleep(slow);
    return agent.invoke(input as never, options);
  },
};
const base: ThreadLock = args.naive ? (_threadId, fn) => fn() : checkpointerThreadLock(checkpointer);
const threadLock: ThreadLock = args.hold
  ? (threadId, fn) => base(threadId, async () => {
      say("received");
      return new Promise<never>(() => {}); // holds the lock until killed
    })
  : base;
const reviews = new ReviewQueue(process.env.REVIEWQUEUE_URL!, process.env.REVIEWQUEUE_TOKEN!);
const resumer = new WebhookResumer(resumable, { client: reviews, secret: process.env.REVIEWQUEUE_WEBHOOK_SECRET!, threadLock });

const server = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on("data", (chunk: Buffer) => chunks.push(chunk));
  request.on("end", async () => {
    if (request.method !== "POST" || request.url !== "/hooks") return response.writeHead(404).end();
    try {
      const resumed = await resumer.handle(request.headers, Buffer.concat(chunks));
      say("resumed", JSON.stringify(resumed.resumed));
      response.writeHead(204).end();
    } catch (error) {
      if (error instanceof WebhookInvalid) return response.writeHead(400).end();
      say("resumed error", String(error)); // answered 500: reviewqueue retries
      response.writeHead(500).end();
    }
  });
});
server.listen(Number(args.port), "127.0.0.1", async () => {
  say("serving");
  const resumed = await interruptsReconcile(reviews, resumable, { threadIds: [args.thread!], source: "support-agent", threadLock });
  say("ready", JSON.stringify(resumed.map((r) => r.resumed)));
});
