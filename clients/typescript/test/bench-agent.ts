/**
 * The Node agent of `make bench`'s measure 22 (bench/agents.py): `--count` threads of test/agent.ts's
 * agent (a MemorySaver) run to their interrupt and forwarded, then resumed by reviewqueue's webhooks
 * through `WebhookResumer` on `--port`. Says `ready {thread: item}` once every ask is forwarded, and
 * `ran <thread> <epoch ms>` when a thread's tool runs (the bench's clock is the same machine's).
 */
import { createServer } from "node:http";
import { parseArgs } from "node:util";

import { MemorySaver } from "@langchain/langgraph";

import { ReviewQueue } from "../src/index.ts";
import { WebhookResumer, interruptsForward } from "../src/langgraph.ts";
import { agentBuild } from "./agent.ts";

const { values: args } = parseArgs({ options: { port: { type: "string" }, count: { type: "string" }, prefix: { type: "string" } } });
const say = (...words: string[]) => process.stdout.write(words.join(" ") + "\n");
const agent = agentBuild({
  checkpointer: new MemorySaver(),
  ran: (_args, threadId) => say("ran", threadId, String(performance.timeOrigin + performance.now())),
});
const reviews = new ReviewQueue(process.env.REVIEWQUEUE_URL!, process.env.REVIEWQUEUE_TOKEN!);
const resumer = new WebhookResumer(agent, { client: reviews, secret: process.env.REVIEWQUEUE_WEBHOOK_SECRET! });

const server = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on("data", (chunk: Buffer) => chunks.push(chunk));
  request.on("end", async () => {
    try {
      await resumer.handle(request.headers, Buffer.concat(chunks));
      response.writeHead(204).end();
    } catch (error) {
      say("error", String(error));
      response.writeHead(500).end();
    }
  });
});
server.listen(Number(args.port), "127.0.0.1", async () => {
  const items: Record<string, string> = {};
  for (let n = 0; n < Number(args.count); n++) {
    const threadId = `${args.prefix}-${n}`;
    await agent.invoke({ messages: [{ role: "user", content: "Please delete customer C-7." }] }, { configurable: { thread_id: threadId } });
    const [item] = await interruptsForward(reviews, agent, { threadId, source: "bench-node-agent" });
    items[threadId] = item!.id;
  }
  say("ready", JSON.stringify(items));
});
