/**
 * The agent the tests and the e2e agent service run: LangChain.js's `createAgent` with
 * `humanInTheLoopMiddleware` and a scripted chat model (no network, no key) that proposes
 * `delete_customer` until a tool has answered, then says "done". Read off the messages, so a
 * replica or a restarted process carries on where the thread is.
 */
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";
import type { BaseCheckpointSaver } from "@langchain/langgraph";
import { createAgent, humanInTheLoopMiddleware, tool } from "langchain";
import { z } from "zod";

export const PROPOSED = { customer_id: "C-7", grace_days: 30 };

export class ScriptedModel extends BaseChatModel {
  _llmType(): string {
    return "scripted";
  }

  bindTools(): this {
    return this;
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const answered = messages.some((m) => ToolMessage.isInstance(m));
    const reply = answered
      ? new AIMessage("done")
      : new AIMessage({ content: "", tool_calls: [{ name: "delete_customer", args: PROPOSED, id: "call-1", type: "tool_call" }] });
    return { generations: [{ message: reply, text: answered ? "done" : "" }] };
  }
}

/** The agent; `ran` is called with each run's arguments and its thread (the side effect the tests count), after `toolMs`;
 * `entered`, if given, is awaited as the tool starts (a race's gate). */
export function agentBuild(options: {
  checkpointer: BaseCheckpointSaver;
  ran: (args: { customer_id: string; grace_days: number }, threadId: string) => void;
  toolMs?: number;
  entered?: () => Promise<void>;
}) {
  const deleteCustomer = tool(
    async (args: { customer_id: string; grace_days: number }, config) => {
      await options.entered?.();
      await new Promise((resolve) => setTimeout(resolve, options.toolMs ?? 0));
      options.ran(args, String(config?.configurable?.thread_id));
      return `deleted ${args.customer_id}`;
    },
    {
      name: "delete_customer",
      description: "Delete a customer, after a grace period.",
      schema: z.object({ customer_id: z.string(), grace_days: z.number().default(30) }),
    },
  );
  return createAgent({
    model: new ScriptedModel({}),
    tools: [deleteCustomer],
    checkpointer: options.checkpointer,
    middleware: [humanInTheLoopMiddleware({ interruptOn: { delete_customer: { allowedDecisions: ["approve", "edit", "reject"] } } })],
  });
}
