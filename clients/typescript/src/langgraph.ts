/**
 * LangGraph.js glue: an agent's own graph pauses at its own `interrupt()` (LangChain.js's
 * `humanInTheLoopMiddleware` included); humans decide in reviewqueue; the thread resumes once.
 *
 * 1. After a run, `interruptsForward` sends each interrupt the thread waits on as an ask, with
 *    `external = {thread_id, interrupt_id}`: reviewqueue's natural key, so forwarding again (a retry,
 *    a restart that reconciles) answers with the same item. The middleware's request
 *    (`actionRequests`, `reviewConfigs`) is sent in the API's shape (`action_requests`, `review_configs`).
 * 2. The decision comes back by webhook (`WebhookResumer`) or long-poll (`decisionWaitResume`), and
 *    `decisionResume` runs `new Command({resume: {[interruptId]: resume}})` exactly once: under the
 *    thread's lock it re-reads the thread's pending interrupts and resumes only if the interrupt is
 *    still among them, so duplicate deliveries, a webhook racing a long-poll, and replicas sharing a
 *    PostgreSQL checkpointer (`checkpointerThreadLock`) resume once. The middleware is resumed with
 *    `{decisions: [...]}` in its actions' order (`edited_action` as its `editedAction`).
 * 3. On start-up, `interruptsReconcile` forwards again what each thread waits on and resumes those
 *    already decided, through the same check-then-resume.
 * 4. Each resume's outcome is reported (`failed` with its tools' errors, else `done` with the
 *    agent's answer), retried by the client; one that still could not be sent is logged and left.
 *
 * The Python client's `reviewqueue_client.langgraph` is the same flow; both send the same asks.
 */
import { Command } from "@langchain/langgraph";

import { type Item, ReviewQueue, ReviewQueueError } from "./client.js";
import { type ThreadLock, checkpointerThreadLock } from "./locks.js";
import { webhookVerify, type Headers } from "./webhooks.js";

export { checkpointerThreadLock, localThreadLock, postgresThreadLock, type ThreadLock } from "./locks.js";

/** The webhook events that carry what a thread resumes with. */
export const RESUMING_EVENTS = ["item.decided", "item.cancelled"];
export const CONTEXT_MESSAGES = 6;
// reviewqueue's bounds: a context message's content, the whole context as JSON, an outcome's message, a title.
const CONTEXT_MESSAGE_MAX = 4000;
const CONTEXT_MAX_BYTES = 30_000;
export const OUTCOME_MESSAGE_MAX = 500;
const TITLE_MAX = 200;
// How the middleware words its error ToolMessage for a rejected call.
const REJECTED = "User rejected the tool call for `";

/** A graph (`StateGraph.compile()`) or an agent (`createAgent`: its `graph` is read for state). */
export interface Resumable {
  invoke(input: unknown, config?: any): Promise<any>;
  getState?(config: any): Promise<any>;
  graph?: { getState(config: any): Promise<any>; checkpointer?: unknown };
  checkpointer?: unknown;
}

/** What a decision did: `resumed` false when it was a no-op (already resumed, or no longer waited on). */
export interface Resumed {
  resumed: boolean;
  threadId?: string;
  interruptId?: string;
  result?: any;
  /** The resumed run's tool errors ("refund_payment: ..."), rejected calls left out. */
  errors: string[];
  /** Its outcome was reported to reviewqueue. */
  reported: boolean;
}

export interface ForwardOptions {
  threadId: string;
  source: string;
  runId?: string;
  /** Why the agent asks: "messages" (the thread's last messages), a context object, or null for none. */
  context?: "messages" | { summary?: string; messages?: Array<{ role: string; content: string; name?: string }> } | null;
  /** Any other field of POST /items (`team`, `policy`, `requested_by`, `priority`). */
  fields?: Record<string, unknown>;
}

const config = (threadId: string) => ({ configurable: { thread_id: threadId } });

async function stateOf(graph: Resumable, threadId: string): Promise<any> {
  if (graph.graph) return graph.graph.getState(config(threadId));
  return graph.getState!(config(threadId));
}

function checkpointerOf(graph: Resumable): unknown {
  return graph.graph?.checkpointer ?? graph.checkpointer;
}

function pendingInterrupts(state: any): Array<{ id: string; value: unknown }> {
  const found = (state?.tasks ?? []).flatMap((task: any) => task.interrupts ?? []);
  return found.filter((i: any) => typeof i?.id === "string");
}

/** Submit every interrupt `threadId` waits on (after a run, or on restart to reconcile); one item each, idempotently. */
export async function interruptsForward(client: ReviewQueue, graph: Resumable, options: ForwardOptions): Promise<Item[]> {
  const state = await stateOf(graph, options.threadId);
  const context = options.context === undefined || options.context === "messages" ? contextFromMessages(state?.values?.messages) : options.context;
  const items: Item[] = [];
  for (const pending of pendingInterrupts(state)) {
    const external = { thread_id: options.threadId, interrupt_id: pending.id, ...(options.runId ? { run_id: options.runId } : {}) };
    const ask = askOf(pending.value);
    const [title, body] = describe(ask);
    try {
      items.push(await client.submit({ ...options.fields, title, body, source: options.source, ask, external, ...(context ? { context } : {}) }));
    } catch (error) {
      // Asked already, by a version that titled it otherwise: the same thread and interrupt are the same ask.
      if (!(error instanceof ReviewQueueError) || error.code !== "idempotency_key_reused") throw error;
      const existing = await first(client.list({ external_id: `${options.threadId}:${pending.id}` }));
      if (existing === undefined) throw error;
      items.push(existing);
    }
  }
  return items;
}

async function first<T>(items: AsyncIterable<T>): Promise<T | undefined> {
  for await (const item of items) return item;
  return undefined;
}

/** The ask reviewqueue is sent for an interrupt's value: the middleware's request in the API's field names. */
export function askOf(value: unknown): unknown {
  const v = value as Record<string, any> | null;
  if (!v || typeof v !== "object" || !Array.isArray(v.actionRequests)) return value;
  return {
    // The middleware ends a description it writes itself with the call, its args as indented JSON over
    // several lines ("...\n\nTool: <name>\nArgs: {\n  ...}"); reviewqueue shows the call beside, so it goes.
    action_requests: v.actionRequests.map((a: any) => ({ name: a.name, args: a.args, ...(description(a) ? { description: description(a) } : {}) })),
    review_configs: (v.reviewConfigs ?? []).map((c: any) => ({
      action_name: c.actionName,
      allowed_decisions: c.allowedDecisions,
      ...(c.argsSchema ? { args_schema: c.argsSchema } : {}),
    })),
  };
}

/** What the middleware is resumed with for a decision: `{decisions: [...]}` in its actions' order, `editedAction` for `edited_action`. */
export function resumeOf(resume: unknown): unknown {
  const r = resume as Record<string, any> | null;
  if (!r || typeof r !== "object" || !Array.isArray(r.decisions)) return resume;
  return {
    ...r,
    decisions: r.decisions.map((d: any) => {
      if (!d || typeof d !== "object" || !("edited_action" in d)) return d;
      const { edited_action, ...rest } = d;
      return { ...rest, editedAction: edited_action };
    }),
  };
}

function description(action: Record<string, any>): string {
  const text = String(action.description ?? "");
  const at = text.indexOf(`Tool: ${action.name}\nArgs:`);
  return (at >= 0 ? text.slice(0, at) : text).trim();
}

function describe(ask: unknown): [string, string] {
  const a = ask as Record<string, any> | null;
  if (!a || typeof a !== "object" || !Array.isArray(a.action_requests)) return ["Review requested", JSON.stringify(ask)];
  const actions = a.action_requests.filter((x: unknown) => x && typeof x === "object");
  const title = ("Approve " + actions.map((x: any) => String(x.name ?? "?")).join(", ")).slice(0, TITLE_MAX);
  const body = actions.map((x: any) => (description(x) ? `${x.name}: ${description(x)}` : String(x.name))).join("\n");
  return [title, body || title];
}

function typeOf(message: any): string | undefined {
  const t = typeof message?.getType === "function" ? message.getType() : typeof message?._getType === "function" ? message._getType() : message?.type;
  return typeof t === "string" && t ? t : undefined;
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((p: any) => (typeof p === "string" ? p : p?.type === "text" ? String(p.text ?? "") : "")).filter(Boolean).join("\n");
}

/** An ask's context from a thread's LangChain messages: the last ones with something to say, oldest first; null without any. */
export function contextFromMessages(messages: unknown, last = CONTEXT_MESSAGES): { messages: Array<{ role: string; content: string; name?: string }> } | null {
  const picked: Array<{ role: string; content: string; name?: string }> = [];
  let size = 0;
  for (const message of [...(Array.isArray(messages) ? messages : [])].reverse()) {
    const role = typeOf(message);
    if (!role) continue;
    let text = textOf((message as any).content);
    const calls = ((message as any).tool_calls ?? []).map((c: any) => c?.name).filter(Boolean);
    if (!text.trim() && calls.length) text = "calls " + calls.join(", ");
    if (!text.trim()) continue;
    const one: { role: string; content: string; name?: string } = { role: role.slice(0, 32), content: printable(text, CONTEXT_MESSAGE_MAX) };
    if (role === "tool" && typeof (message as any).name === "string" && (message as any).name) one.name = printable((message as any).name, 100);
    size += Buffer.byteLength(JSON.stringify(one));
    if (picked.length === last || size > CONTEXT_MAX_BYTES) break;
    picked.push(one);
  }
  return picked.length ? { messages: picked.reverse() } : null;
}

function printable(text: string, limit: number): string {
  // eslint-disable-next-line no-control-regex
  const clean = text.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/g, " ");
  return clean.length <= limit ? clean : clean.slice(0, limit - 1) + "…";
}

/**
 * The errors of the tools in `messages` (error ToolMessages), but not a reviewer's rejection: the
 * middleware's own words for one, or a `rejections` message (what a reject decision said).
 */
export function runToolErrors(messages: unknown, rejections: string[] = []): string[] {
  const errors: string[] = [];
  for (const m of Array.isArray(messages) ? messages : []) {
    if (typeOf(m) !== "tool" || (m as any).status !== "error") continue;
    const text = typeof (m as any).content === "string" ? (m as any).content : JSON.stringify((m as any).content);
    if (!text.startsWith(REJECTED) && !rejections.includes(text)) errors.push(`${(m as any).name}: ${text}`);
  }
  return errors;
}

function rejectionsOf(resume: unknown): string[] {
  const decisions = (resume as { decisions?: unknown } | null)?.decisions;
  return Array.isArray(decisions) ? decisions.filter((d) => d?.type === "reject" && typeof d.message === "string").map((d) => d.message) : [];
}

function answer(result: any): string {
  const messages = Array.isArray(result?.messages) ? result.messages : [];
  for (const m of [...messages].reverse()) {
    if (typeOf(m) === "ai" && !(m.tool_calls ?? []).length && typeof m.content === "string") return m.content;
  }
  return "";
}

/**
 * Resume the thread with `{[interruptId]: resume}` if, under its lock, it still waits on that interrupt.
 * `threadLock` undefined: the lock the graph's checkpointer shares (`checkpointerThreadLock`).
 */
export async function decisionResume(
  graph: Resumable,
  options: { threadId: string; interruptId: string; resume: unknown; threadLock?: ThreadLock },
): Promise<Resumed> {
  const { threadId, interruptId } = options;
  const lock = options.threadLock ?? checkpointerThreadLock(checkpointerOf(graph));
  return lock(threadId, async () => {
    const state = await stateOf(graph, threadId);
    if (!pendingInterrupts(state).some((i) => i.id === interruptId)) return { resumed: false, threadId, interruptId, errors: [], reported: false };
    const seen = Array.isArray(state?.values?.messages) ? state.values.messages.length : 0;
    const result = await graph.invoke(new Command({ resume: { [interruptId]: resumeOf(options.resume) } }), config(threadId));
    const added = Array.isArray(result?.messages) ? result.messages.slice(seen) : [];
    return { resumed: true, threadId, interruptId, result, errors: runToolErrors(added, rejectionsOf(options.resume)), reported: false };
  });
}

/** Report what a resume did to the item that asked (nothing for a no-op); `resumed` with `reported` set. */
export async function outcomeReport(client: ReviewQueue, options: { itemId: string; resumed: Resumed }): Promise<Resumed> {
  const { resumed } = options;
  if (!resumed.resumed) return resumed;
  const status = resumed.errors.length ? "failed" : "done";
  const message = printable(resumed.errors.length ? resumed.errors.join("; ") : answer(resumed.result), OUTCOME_MESSAGE_MAX);
  try {
    await client.reportOutcome(options.itemId, { status, message });
  } catch (error) {
    if (!(error instanceof ReviewQueueError)) throw error;
    console.warn(`reviewqueue: the outcome of item ${options.itemId} (${status}) was not reported: ${error.message}`);
    return resumed;
  }
  return { ...resumed, reported: true };
}

interface Decision {
  itemId?: string;
  threadId: string;
  interruptId: string;
  resume: unknown;
}

/** The decision an item (an API read, or a webhook's `data`) carries for an agent's thread; null without one. */
function decisionOf(item: Record<string, any>): Decision | null {
  const external = item.external;
  const resume = item.resume ?? item.decision?.resume; // an API read's, or a webhook's decision's
  if (!external?.thread_id || !external?.interrupt_id || resume === undefined || resume === null) return null;
  return { itemId: item.id, threadId: external.thread_id, interruptId: external.interrupt_id, resume };
}

/** Resume the agent an item (an API read, or a webhook's `data`) was asked by, once it carries a decision; then report with `client` (null: no report). */
export async function itemResume(
  graph: Resumable,
  item: Item | Record<string, any>,
  options: { client: ReviewQueue | null; threadLock?: ThreadLock },
): Promise<Resumed> {
  const decision = decisionOf(item as Record<string, any>);
  if (decision === null) return { resumed: false, errors: [], reported: false };
  const resumed = await decisionResume(graph, { ...decision, threadLock: options.threadLock });
  return options.client && decision.itemId ? outcomeReport(options.client, { itemId: decision.itemId, resumed }) : resumed;
}

/** Long-poll the item's decision for up to `timeout` seconds and resume its agent with it (then report its outcome). */
export async function decisionWaitResume(
  client: ReviewQueue,
  graph: Resumable,
  options: { itemId: string; timeout: number; threadLock?: ThreadLock; report?: boolean },
): Promise<Resumed> {
  const item = await client.wait(options.itemId, { timeout: options.timeout });
  if (item === null) return { resumed: false, errors: [], reported: false };
  return itemResume(graph, item, { client: options.report === false ? null : client, threadLock: options.threadLock });
}

/** On start-up, for each thread: forward what it waits on again, and resume it, once, with what is already decided. */
export async function interruptsReconcile(
  client: ReviewQueue,
  graph: Resumable,
  options: { threadIds: Iterable<string>; source: string; threadLock?: ThreadLock; fields?: Record<string, unknown> },
): Promise<Resumed[]> {
  const done: Resumed[] = [];
  for (const threadId of options.threadIds) {
    for (const item of await interruptsForward(client, graph, { threadId, source: options.source, fields: options.fields })) {
      if (item.resume !== undefined && item.resume !== null) done.push(await itemResume(graph, item, { client, threadLock: options.threadLock }));
    }
  }
  return done;
}

/**
 * A framework-neutral webhook handler: `await resumer.handle(headers, rawBody)` verifies, resumes once,
 * reports the outcome. A `WebhookInvalid` is a 400 to answer, anything else a 2xx (a no-op included,
 * so reviewqueue stops retrying).
 */
export class WebhookResumer {
  constructor(
    readonly graph: Resumable,
    readonly options: { client: ReviewQueue; secret: string; threadLock?: ThreadLock },
  ) {}

  async handle(headers: Headers, body: string | Uint8Array): Promise<Resumed> {
    const event = webhookVerify({ secret: this.options.secret, headers, body });
    if (!RESUMING_EVENTS.includes(event.type)) return { resumed: false, errors: [], reported: false };
    return itemResume(this.graph, event.data, { client: this.options.client, threadLock: this.options.threadLock });
  }
}
