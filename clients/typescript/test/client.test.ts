/** The API client against a real reviewqueue server (and, for its retries, a fetch that answers as told). */
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { ReviewQueue, ReviewQueueError, retryAfterSeconds } from "../src/index.ts";
import { SERVER, TOKEN, moderatorVerdict, unique } from "./support.ts";

const reviews = () => new ReviewQueue(SERVER(), TOKEN());

describe("ReviewQueue against a real server", () => {
  test("a submit under one idempotency key is one item; read and list find it", async () => {
    const key = unique("key");
    const first = await reviews().submit({ title: "Refund order 1", body: "Customer asks", source: "ts-tests", idempotencyKey: key });
    const again = await reviews().submit({ title: "Refund order 1", body: "Customer asks", source: "ts-tests", idempotencyKey: key });
    assert.equal(again.id, first.id);
    assert.equal(first.status, "pending");
    assert.equal((await reviews().read(first.id)).title, "Refund order 1");
    const listed = [];
    for await (const item of reviews().list({ source: "ts-tests", status: "pending", limit: 1 })) listed.push(item.id);
    assert.ok(listed.includes(first.id), "paged through every page");
  });

  test("the same key with another body is the API's idempotency_key_reused", async () => {
    const key = unique("key");
    await reviews().submit({ title: "A", body: "a", source: "ts-tests", idempotencyKey: key });
    await assert.rejects(reviews().submit({ title: "B", body: "b", source: "ts-tests", idempotencyKey: key }), (error: ReviewQueueError) => {
      assert.ok(error instanceof ReviewQueueError);
      assert.equal(error.code, "idempotency_key_reused");
      assert.equal(error.status, 409);
      return true;
    });
  });

  test("wait is null while undecided, then the decided item; outcome reports stand once", async () => {
    const item = await reviews().submit({ title: "Wait for me", body: "b", source: "ts-tests" });
    assert.equal(await reviews().wait(item.id, { timeout: 0.3 }), null);
    const waiting = reviews().wait(item.id, { timeout: 30 });
    await moderatorVerdict(item.id, "approve");
    const decided = await waiting;
    assert.equal(decided?.status, "approved");
    await assert.rejects(reviews().cancel(item.id), { code: "already_decided" });
    const reported = await reviews().reportOutcome(item.id, { status: "done", message: "refunded" });
    assert.equal(reported.outcome?.status, "done");
    assert.equal((await reviews().reportOutcome(item.id, { status: "done", message: "refunded" })).outcome?.message, "refunded");
    await assert.rejects(reviews().reportOutcome(item.id, { status: "failed", message: "no" }), { code: "outcome_already_reported" });
  });

  test("cancel withdraws a pending item; an unknown id is not_found; a bad body is refused with its code", async () => {
    const item = await reviews().submit({ title: "Cancel me", body: "b", source: "ts-tests" });
    assert.equal((await reviews().cancel(item.id, { reason: "changed my mind" })).status, "withdrawn");
    await assert.rejects(reviews().read("00000000-0000-0000-0000-000000000000"), { code: "not_found", status: 404 });
    await assert.rejects(reviews().reportOutcome(item.id, { status: "sideways" as "done" }), (error: ReviewQueueError) => error.status === 422 || error.status === 400);
  });

  test("webhook endpoints: created with a secret once, listed without, deleted", async () => {
    const name = unique("hook");
    const created = await reviews().createWebhook({ name, url: "https://example.com/hooks", events: ["item.decided"] });
    assert.match(created.secret, /^whsec_/);
    const listed = (await reviews().webhooks()).find((e) => e.name === name);
    assert.ok(listed && !("secret" in listed));
    await assert.rejects(reviews().createWebhook({ name, url: "https://example.com/hooks" }), { code: "name_taken" });
    await reviews().deleteWebhook(created.id);
    assert.equal((await reviews().webhooks()).find((e) => e.name === name), undefined);
  });

  test("a server that cannot be reached is ReviewQueueError unreachable, after the retries", async () => {
    const client = new ReviewQueue("http://127.0.0.1:9", "token", { attempts: 2, timeout: 2 });
    await assert.rejects(client.read("x"), (error: ReviewQueueError) => error.code === "unreachable" && error.status === 0 && error.transient);
  });
});

/** A fetch that answers from `answers` in turn and counts the requests. */
function scripted(answers: Array<[number, Record<string, string>, unknown]>) {
  const sent: string[] = [];
  const fake: typeof fetch = async (input, init) => {
    sent.push(`${init?.method} ${String(input)}`);
    const [status, headers, body] = answers.shift()!;
    return new Response(body === null ? null : JSON.stringify(body), { status, headers });
  };
  return { fake, sent };
}

describe("retries", () => {
  test("a 429 and a 503 with Retry-After are sent again, no sooner than asked", async () => {
    const { fake, sent } = scripted([
      [429, { "Retry-After": "1" }, { error: "too_many_waits", message: "later" }],
      [503, { "Retry-After": "0" }, { error: "overloaded", message: "later" }],
      [200, {}, { id: "i", status: "pending" }],
    ]);
    const started = performance.now();
    const item = await new ReviewQueue("http://reviews.test", "t", { fetch: fake }).read("i");
    assert.equal(item.id, "i");
    assert.equal(sent.length, 3);
    assert.ok(performance.now() - started >= 1000, "waited the Retry-After");
  });

  test("a write that is not safe to repeat is sent once; a Retry-After over the bound ends the tries", async () => {
    const hook = scripted([[503, {}, { error: "unavailable", message: "x" }]]);
    await assert.rejects(new ReviewQueue("http://reviews.test", "t", { fetch: hook.fake }).createWebhook({ name: "n", url: "https://e.com" }), { code: "unavailable" });
    assert.equal(hook.sent.length, 1);
    const long = scripted([[429, { "Retry-After": "3600" }, { error: "too_many_waits", message: "x" }]]);
    await assert.rejects(new ReviewQueue("http://reviews.test", "t", { fetch: long.fake }).read("i"), { code: "too_many_waits", retryAfter: 3600 });
    assert.equal(long.sent.length, 1);
  });

  test("a refusal (4xx) is not retried; at most `attempts` tries of a transient error", async () => {
    const refused = scripted([[404, {}, { error: "not_found", message: "no" }]]);
    await assert.rejects(new ReviewQueue("http://reviews.test", "t", { fetch: refused.fake }).read("i"), { code: "not_found" });
    assert.equal(refused.sent.length, 1);
    const down = scripted(Array.from({ length: 3 }, () => [500, { "Retry-After": "0" }, "oops"] as [number, Record<string, string>, unknown]));
    await assert.rejects(new ReviewQueue("http://reviews.test", "t", { fetch: down.fake, attempts: 3 }).read("i"), { code: "http_error", status: 500 });
    assert.equal(down.sent.length, 3);
  });

  test("a submit without a key is given one, the same on every try", async () => {
    const keys: Array<string | null> = [];
    const fake: typeof fetch = async (_input, init) => {
      keys.push(new Headers(init?.headers).get("Idempotency-Key"));
      return keys.length === 1 ? new Response("{}", { status: 502, headers: { "Retry-After": "0" } }) : new Response(JSON.stringify({ id: "i" }), { status: 201 });
    };
    await new ReviewQueue("http://reviews.test", "t", { fetch: fake }).submit({ title: "t", body: "b", source: "s" });
    assert.equal(keys.length, 2);
    assert.ok(keys[0] && keys[0] === keys[1]);
  });

  test("Retry-After: seconds or an HTTP date", () => {
    assert.equal(retryAfterSeconds("7"), 7);
    assert.equal(retryAfterSeconds(null), null);
    assert.equal(retryAfterSeconds("soon"), null);
    const later = retryAfterSeconds(new Date(Date.now() + 10_000).toUTCString())!;
    assert.ok(later > 5 && later <= 10, String(later));
  });
});
