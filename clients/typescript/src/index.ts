/** reviewqueue's TypeScript client; the LangGraph.js glue is `@reviewqueue/client/langgraph`. */
export * from "./client.js";
export * from "./webhooks.js";
export * from "./locks.js";
export type * as schema from "./schema.js";
