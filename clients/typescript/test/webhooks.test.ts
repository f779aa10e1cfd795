/** Webhook verification: what reviewqueue signs (Standard Webhooks) verifies; anything else is WebhookInvalid. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { Webhook } from "standardwebhooks";

import { WebhookInvalid, webhookVerify } from "../src/index.ts";

const SECRET = "whsec_" + Buffer.from("ts-webhook-tests-ts-webhook-test").toString("base64");

function signed(body: string, at = new Date(), id = "msg_1") {
  return { "webhook-id": id, "webhook-timestamp": String(Math.floor(at.getTime() / 1000)), "webhook-signature": new Webhook(SECRET).sign(id, at, body) };
}

test("a signed event verifies, its delivery id the webhook-id, whatever the headers' case", () => {
  const body = JSON.stringify({ type: "item.decided", timestamp: "2026-12-01T00:00:00Z", data: { id: "i" } });
  const headers = Object.fromEntries(Object.entries(signed(body)).map(([k, v]) => [k.toUpperCase(), v]));
  const event = webhookVerify({ secret: SECRET, headers, body: Buffer.from(body) });
  assert.deepEqual([event.deliveryId, event.type, event.data], ["msg_1", "item.decided", { id: "i" }]);
  assert.equal(webhookVerify({ secret: SECRET, headers: new Headers(signed(body)), body }).type, "item.decided");
});

test("a changed body, another secret, an old timestamp, missing headers or a non-event are WebhookInvalid", () => {
  const body = JSON.stringify({ type: "item.decided", data: {} });
  const other = "whsec_" + Buffer.from("another-secret-another-secret-an").toString("base64");
  const cases: Array<[string, Record<string, string>, string]> = [
    [SECRET, signed(body), body.replace("decided", "approved")],
    [other, signed(body), body],
    [SECRET, signed(body, new Date(Date.now() - 10 * 60_000)), body],
    [SECRET, {}, body],
    [SECRET, { ...signed(body), "webhook-signature": "v1,not base64!" }, body],
    // The probe's inputs (issue 41): a signature that is not base64, no comma, two commas, not ASCII,
    // and timestamps that are not a number of seconds.
    ...["v1,!!!notbase64", "v1", "v1,a,b", "v1,ÿÿÿÿ", ""].map((sig): [string, Record<string, string>, string] => [SECRET, { ...signed(body), "webhook-signature": sig }, body]),
    ...["nan", "inf", "1e400", "soon", "", "１２"].map((ts): [string, Record<string, string>, string] => [SECRET, { ...signed(body), "webhook-timestamp": ts }, body]),
    [SECRET, signed("[1, 2]"), "[1, 2]"],
  ];
  for (const [secret, headers, sent] of cases) {
    assert.throws(() => webhookVerify({ secret, headers, body: sent }), WebhookInvalid);
  }
});

test("a replay within five minutes verifies again with the same delivery id; an older one does not", () => {
  const body = JSON.stringify({ type: "item.decided", data: { id: "i" } });
  const headers = signed(body, new Date(Date.now() - 4 * 60_000), "msg_7");
  const [first, replayed] = [webhookVerify({ secret: SECRET, headers, body }), webhookVerify({ secret: SECRET, headers, body })];
  assert.deepEqual([first.deliveryId, replayed.deliveryId], ["msg_7", "msg_7"]); // what a handler de-duplicates on
  assert.throws(() => webhookVerify({ secret: SECRET, headers: signed(body, new Date(Date.now() - 6 * 60_000)), body }), WebhookInvalid);
});
