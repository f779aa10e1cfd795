/**
 * A typed client for reviewqueue's /api/v1 (submit, read, list, wait, cancel, report outcome, webhooks),
 * speaking the OpenAPI schema's shapes (./schema.ts, generated from it) as the Python client does.
 */
import { randomUUID } from "node:crypto";

import type {
  CancelIn,
  ContextIn,
  ExternalIn,
  ItemOut,
  ItemPage,
  ItemStatus,
  ItemSubmitIn,
  OutcomeIn,
  OutcomeStatus,
  WebhookEndpointCreated,
  WebhookEndpointIn,
  WebhookEndpointOut,
  WebhookEndpointPage,
} from "./schema.js";

export type { ContextIn, ExternalIn, ItemOut, ItemStatus, OutcomeStatus, WebhookEndpointCreated, WebhookEndpointOut };

/** An item as /api/v1 answers it. */
export type Item = ItemOut;

/** The server holds one long-poll at most this long (its LONGPOLL_MAX_SECONDS); longer waits loop. */
export const LONGPOLL_MAX_SECONDS = 60;
/**
 * A request safe to send again that met a connection error, a timeout, a 429 or a 5xx is sent
 * again, up to ATTEMPTS times in all, after a random wait of up to BACKOFF·2^(n-1) s (at most
 * BACKOFF_MAX), never sooner than its Retry-After; a Retry-After over RETRY_AFTER_MAX ends the tries.
 */
export const ATTEMPTS = 8;
export const BACKOFF = 0.5;
export const BACKOFF_MAX = 30;
export const RETRY_AFTER_MAX = 60;

/** The error codes this client's callers act on (the server's `error` field; any other string may come too). */
export type ErrorCode =
  | "invalid"
  | "not_found"
  | "idempotency_key_reused"
  | "already_decided"
  | "not_decided"
  | "outcome_already_reported"
  | "too_many_waits"
  | "name_taken"
  | "unreachable"
  | "http_error"
  | (string & {});

/**
 * An answer other than success: `code` is the API's stable error code, `status` the HTTP status
 * (0 when the server was not reached: code `unreachable`), `retryAfter` the seconds its Retry-After asked for.
 */
export class ReviewQueueError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  readonly body: Record<string, unknown>;
  readonly retryAfter: number | null;

  constructor(options: { status: number; code: ErrorCode; message: string; body?: Record<string, unknown>; retryAfter?: number | null; cause?: unknown }) {
    super(`${options.status} ${options.code}: ${options.message}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ReviewQueueError";
    this.status = options.status;
    this.code = options.code;
    this.body = options.body ?? {};
    this.retryAfter = options.retryAfter ?? null;
  }

  /** The server could not answer now (unreachable, 429, 5xx): the same request may succeed later. */
  get transient(): boolean {
    return this.status === 0 || this.status === 429 || this.status >= 500;
  }
}

export interface SubmitOptions extends Omit<ItemSubmitIn, "external" | "context"> {
  external?: ExternalIn | null;
  context?: ContextIn | null;
  idempotencyKey?: string;
}

export type ListFilters = { status?: ItemStatus; source?: string; external_id?: string; decided_after?: string; graph?: string; limit?: number };

export interface ClientOptions {
  /** Seconds for a request (a long-poll gets LONGPOLL_MAX_SECONDS more). */
  timeout?: number;
  /** Tries in all for a request safe to send again. */
  attempts?: number;
  /** A fetch of your own (a proxy, a test's). */
  fetch?: typeof fetch;
}

interface Call {
  method: "GET" | "POST" | "DELETE";
  path: string;
  params?: Record<string, string | number | undefined>;
  json?: unknown;
  headers?: Record<string, string>;
  /** Sending it again cannot do it twice. */
  safe: boolean;
  /** Extra seconds for the answer (a long-poll's). */
  wait?: number;
}

/**
 * `new ReviewQueue("https://reviews.example.com", token)`. Every refusal is a `ReviewQueueError`,
 * a connection error or timeout too (code `unreachable`). A request safe to send again (reads,
 * long-polls, cancels, outcome reports, submits under a key: `external` ids or an idempotency key;
 * one without either is given an Idempotency-Key of its own) is retried as ATTEMPTS says;
 * webhook endpoint changes are sent once.
 */
export class ReviewQueue {
  readonly baseUrl: string;
  readonly attempts: number;
  private readonly token: string;
  private readonly timeout: number;
  private readonly fetcher: typeof fetch;

  constructor(baseUrl: string, token: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "") + "/api/v1";
    this.token = token;
    this.timeout = options.timeout ?? 30;
    this.attempts = options.attempts ?? ATTEMPTS;
    this.fetcher = options.fetch ?? fetch;
  }

  /** Submit an item; with `ask` and `external` thread and interrupt ids, a resubmit is answered with the same item. */
  async submit(options: SubmitOptions): Promise<Item> {
    const { idempotencyKey, ...fields } = options;
    const payload = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null));
    const key = idempotencyKey ?? (fields.external ? undefined : `rq-client-${randomUUID()}`);
    return (await this.send({ method: "POST", path: "/items", json: payload, headers: key ? { "Idempotency-Key": key } : {}, safe: true })).json;
  }

  async read(itemId: string): Promise<Item> {
    return (await this.send({ method: "GET", path: `/items/${encodeURIComponent(itemId)}`, safe: true })).json;
  }

  /** Every item of this client matching `filters`, page by page: `for await (const item of reviews.list({status: "pending"}))`. */
  async *list(filters: ListFilters = {}): AsyncGenerator<Item> {
    let params: Record<string, string | number | undefined> | null = { ...filters };
    while (params !== null) {
      const page: ItemPage = (await this.send({ method: "GET", path: "/items", params, safe: true })).json;
      yield* page.items;
      params = page.next_cursor ? { ...params, cursor: page.next_cursor } : null;
    }
  }

  /** The item once decided, long-polling up to `timeout` seconds; null if it is still undecided then. */
  async wait(itemId: string, options: { timeout: number }): Promise<Item | null> {
    const end = performance.now() + options.timeout * 1000;
    for (;;) {
      const left = Math.max(0, (end - performance.now()) / 1000);
      const wait = Math.min(left, LONGPOLL_MAX_SECONDS);
      const answer = await this.send({ method: "GET", path: `/items/${encodeURIComponent(itemId)}/decision`, params: { wait }, safe: true, wait });
      if (answer.status === 200) return answer.json;
      if (left <= 0) return null;
    }
  }

  /** Withdraw a pending item; `ReviewQueueError` code `already_decided` if a moderator came first. */
  async cancel(itemId: string, options: { reason?: string } = {}): Promise<Item> {
    const json: CancelIn = { reason: options.reason ?? "" };
    return (await this.send({ method: "POST", path: `/items/${encodeURIComponent(itemId)}/cancel`, json, safe: true })).json;
  }

  /**
   * Tell reviewqueue what the agent did with the decision. The first report stands: the same one
   * again is a success, a different one `outcome_already_reported`; `not_decided` before the decision.
   */
  async reportOutcome(itemId: string, options: { status: OutcomeStatus; message?: string }): Promise<Item> {
    const json: OutcomeIn = { status: options.status, message: options.message ?? "" };
    return (await this.send({ method: "POST", path: `/items/${encodeURIComponent(itemId)}/outcome`, json, safe: true })).json;
  }

  /** Register an endpoint for this client's item events; keep the returned `secret`, it is never shown again. */
  async createWebhook(options: WebhookEndpointIn): Promise<WebhookEndpointCreated> {
    return (await this.send({ method: "POST", path: "/webhooks", json: options, safe: false })).json;
  }

  async webhooks(): Promise<WebhookEndpointOut[]> {
    const page: WebhookEndpointPage = (await this.send({ method: "GET", path: "/webhooks", safe: true })).json;
    return page.endpoints;
  }

  async deleteWebhook(endpointId: number): Promise<void> {
    await this.send({ method: "DELETE", path: `/webhooks/${endpointId}`, safe: false });
  }

  private async send(call: Call): Promise<{ status: number; json: any }> {
    const attempts = call.safe ? this.attempts : 1;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.sendOnce(call);
      } catch (error) {
        if (!(error instanceof ReviewQueueError) || !error.transient || attempt >= attempts) throw error;
        const asked = error.retryAfter ?? 0;
        if (asked > RETRY_AFTER_MAX) throw error;
        await sleep(Math.max(retryBackoff(attempt), asked) * 1000);
      }
    }
  }

  private async sendOnce(call: Call): Promise<{ status: number; json: any }> {
    const url = new URL(this.baseUrl + call.path);
    for (const [k, v] of Object.entries(call.params ?? {})) if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}`, Accept: "application/json", ...call.headers };
    if (call.json !== undefined) headers["Content-Type"] = "application/json";
    const signal = AbortSignal.timeout(Math.ceil((this.timeout + (call.wait ?? 0)) * 1000));
    let response: Response;
    let text: string;
    try {
      response = await this.fetcher(url, {
        method: call.method,
        headers,
        body: call.json === undefined ? undefined : JSON.stringify(call.json),
        signal,
      });
      text = await response.text();
    } catch (cause) {
      throw new ReviewQueueError({ status: 0, code: "unreachable", message: String(cause), cause });
    }
    let json: any = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (response.ok) return { status: response.status, json };
    const body = json !== null && typeof json === "object" && !Array.isArray(json) ? (json as Record<string, unknown>) : {};
    throw new ReviewQueueError({
      status: response.status,
      code: typeof body.error === "string" ? body.error : "http_error",
      message: typeof body.message === "string" ? body.message : text.slice(0, 200),
      body,
      retryAfter: retryAfterSeconds(response.headers.get("Retry-After")),
    });
  }
}

/** A Retry-After in seconds (delta-seconds or an HTTP date); null if absent or unreadable. */
export function retryAfterSeconds(value: string | null): number | null {
  if (value === null) return null;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  const when = Date.parse(trimmed);
  return Number.isNaN(when) || !/GMT|[+-]\d{4}$/.test(trimmed) ? null : Math.max(0, (when - Date.now()) / 1000);
}

/** Full jitter: a random wait of up to BACKOFF·2^(attempt-1) s, at most BACKOFF_MAX. */
export function retryBackoff(attempt: number): number {
  return Math.random() * Math.min(BACKOFF_MAX, BACKOFF * 2 ** (attempt - 1));
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
