/**
 * What the tests are given by their harness (e2e/test_typescript_client.py, which starts a real
 * reviewqueue server): its URL, an API client's token, a moderator's session, a PostgreSQL database
 * of their own, and the Python client's advisory keys of a few thread ids.
 */
import assert from "node:assert/strict";

export function env(name: string): string {
  const value = process.env[name];
  assert.ok(value, `${name} is not set: these tests run against a real server (python -m pytest e2e/test_typescript_client.py)`);
  return value;
}

export const SERVER = () => env("RQ_URL");
export const TOKEN = () => env("RQ_TOKEN");
export const POSTGRES_URL = () => env("RQ_POSTGRES_URL");

/** A moderator decides an ask's actions, as the item page's form posts it (session cookie + CSRF). */
export async function moderatorDecide(itemId: string, decisions: unknown[]): Promise<Record<string, unknown>> {
  const answer = await fetch(`${SERVER()}/api/items/${itemId}/decision`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRFToken": env("RQ_CSRF"), Cookie: env("RQ_COOKIE") },
    body: JSON.stringify({ decisions }),
  });
  const body = (await answer.json()) as Record<string, unknown>;
  assert.equal(answer.status, 200, JSON.stringify(body));
  return body;
}

/** The same, with one verdict for a plain item ("approve", "reject"). */
export async function moderatorVerdict(itemId: string, decision: string): Promise<Record<string, unknown>> {
  const answer = await fetch(`${SERVER()}/api/items/${itemId}/decision`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRFToken": env("RQ_CSRF"), Cookie: env("RQ_COOKIE") },
    body: JSON.stringify({ decision }),
  });
  const body = (await answer.json()) as Record<string, unknown>;
  assert.equal(answer.status, 200, JSON.stringify(body));
  return body;
}

export const unique = (prefix: string) => `${prefix}-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
