/** reviewqueue's webhooks, verified with the Standard Webhooks library (the signature scheme they use). */
import { Webhook } from "standardwebhooks";

/**
 * The request is not what reviewqueue signed with this endpoint's secret: headers missing or
 * malformed, a signature that does not match, or a timestamp more than five minutes away.
 */
export class WebhookInvalid extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookInvalid";
  }
}

/**
 * A verified event. `deliveryId` is its `webhook-id`: the same on every retry and redelivery of it,
 * so a handler that must act once keys on it (a replay within five minutes verifies too).
 */
export interface WebhookEvent {
  deliveryId: string;
  type: string;
  timestamp: string;
  data: Record<string, any>;
  raw: Record<string, unknown>;
}

export type Headers = Record<string, string | string[] | undefined> | globalThis.Headers;

/**
 * The event if `headers` sign `body` with `secret` and their timestamp is within five minutes of now;
 * `WebhookInvalid` for anything else a request can carry. Pass the raw body, as received.
 */
export function webhookVerify(options: { secret: string; headers: Headers; body: string | Uint8Array }): WebhookEvent {
  const signer = new Webhook(options.secret); // outside the try: a malformed secret is the caller's error
  const lowered = headersLowered(options.headers);
  let raw: unknown;
  try {
    raw = signer.verify(options.body, lowered);
  } catch (error) {
    throw new WebhookInvalid(`${(error as Error)?.name ?? "Error"}: ${(error as Error)?.message ?? String(error)}`);
  }
  const event = raw as Record<string, unknown> | null;
  const data = event?.data ?? {};
  if (event === null || typeof event !== "object" || typeof event.type !== "string" || typeof data !== "object" || data === null || Array.isArray(data)) {
    throw new WebhookInvalid("not a reviewqueue event");
  }
  return { deliveryId: lowered["webhook-id"]!, type: event.type, timestamp: String(event.timestamp ?? ""), data: data as Record<string, any>, raw: event };
}

function headersLowered(headers: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  const entries = headers instanceof globalThis.Headers ? headers.entries() : Object.entries(headers);
  for (const [k, v] of entries) {
    if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : v;
  }
  return out;
}
