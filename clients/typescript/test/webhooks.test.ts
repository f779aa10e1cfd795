/** Webhook verification: what reviewqueue signs (Standard Webhooks) verifies; anything else is WebhookInvalid. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { Webhook } from "standardwebhooks";

import { WebhookInvalid, webhookVerify } from "../src/index.ts";

const SECRET = "whsec_" + Buffer.from("ts-webhook-tests-ts-webhook-test").toString("base64");

function signed(body: string, at = new Date()) {
  const id = "msg_1";
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
    [SECRET, signed("[1, 2]"), "[1, 2]"],
  ];
  for (const [secret, headers, sent] of cases) {
    assert.throws(() => webhookVerify({ secret, headers, body: sent }), WebhookInvalid);
  }
});
