// runAgentHost: run agent turns when subagentd asks for them.

import type { SubagentdClient } from "./client.js";
import type { TurnEndParams, TurnInterrupt, TurnStart } from "./types.js";

export type TurnReason = TurnEndParams["reason"];

/** What a turn function returns: how the turn ended and the agent's closing message. */
export interface TurnOutcome {
  /** Default `"completed"`; the helper reports `"aborted"` whenever the turn was interrupted. */
  reason?: TurnReason;
  output?: string;
}

/** Why a turn's AbortSignal fired: the `turn/interrupt` params. */
export class TurnInterruptedError extends Error {
  readonly interrupt: TurnInterrupt;
  constructor(interrupt: TurnInterrupt) {
    super(`turn ${interrupt.turn_id} of ${interrupt.agent_id} interrupted (${interrupt.cause.kind})`);
    this.name = "TurnInterruptedError";
    this.interrupt = interrupt;
  }
}

export interface AgentHostOptions {
  /**
   * Run one turn of `start.agent_id` on `start.messages`. `signal` aborts when subagentd sends
   * `turn/interrupt` for this turn (its reason is a `TurnInterruptedError`); the function should
   * then return promptly. Throwing ends the turn with reason `"error"` and the error's message as
   * its output, and reports the error to `onError` (or `"aborted"`, unreported, when the signal
   * fired).
   */
  turn: (start: TurnStart, signal: AbortSignal) => Promise<TurnOutcome | void> | TurnOutcome | void;
  /**
   * Called when a turn function throws (unless its signal fired), or `turns/end` fails. Default:
   * `reportTurnError`, which prints the error to stderr.
   */
  onError?: (error: unknown, start: TurnStart) => void;
  /** Called after `turns/end` was acknowledged. */
  onTurnEnd?: (start: TurnStart, ended: { reason: TurnReason; output?: string }) => void;
}

export interface AgentHost {
  /** Turns running now, by turn id. */
  readonly active: ReadonlyMap<string, TurnStart>;
  /** Resolves when no turn is running (immediately when none is). */
  idle(): Promise<void>;
  /** Stop listening; running turns are aborted (and still reported). */
  stop(): void;
}

/** The default `onError`: print the failure, with its stack, to stderr. */
export function reportTurnError(error: unknown, start: TurnStart): void {
  console.error(`subagentd: turn ${start.turn_id} of agent "${start.agent_id}" failed:`, error);
}

/** The text a thrown value leaves as the turn's output. */
function errorText(error: unknown): string {
  return error instanceof Error ? error.message || error.name : String(error);
}

/**
 * React to `turn/start` by calling `options.turn` and then `turns/end`, and to `turn/interrupt`
 * by aborting that turn's signal (the turn is then reported with reason `"aborted"`).
 */
export function runAgentHost(client: SubagentdClient, options: AgentHostOptions): AgentHost {
  const onError = options.onError ?? reportTurnError;
  const controllers = new Map<string, AbortController>();
  const active = new Map<string, TurnStart>();
  let idleWaiters: Array<() => void> = [];

  const maybeIdle = () => {
    if (active.size > 0) return;
    const waiters = idleWaiters;
    idleWaiters = [];
    for (const resolve of waiters) resolve();
  };

  const run = async (start: TurnStart) => {
    const controller = new AbortController();
    controllers.set(start.turn_id, controller);
    active.set(start.turn_id, start);
    let reason: TurnReason = "completed";
    let output: string | undefined;
    try {
      const outcome = await options.turn(start, controller.signal);
      reason = outcome?.reason ?? "completed";
      output = outcome?.output;
    } catch (error) {
      reason = "error";
      output = controller.signal.aborted ? undefined : errorText(error);
      if (!controller.signal.aborted) onError(error, start);
    }
    if (controller.signal.aborted) reason = "aborted";
    controllers.delete(start.turn_id);
    try {
      const ended: TurnEndParams = { agent_id: start.agent_id, turn_id: start.turn_id, reason };
      if (output !== undefined) ended.output = output;
      await client.turns.end(ended);
      options.onTurnEnd?.(start, { reason, output });
    } catch (error) {
      onError(error, start);
    } finally {
      active.delete(start.turn_id);
      maybeIdle();
    }
  };

  const onStart = (start: TurnStart) => {
    void run(start);
  };
  const onInterrupt = (interrupt: TurnInterrupt) => {
    const controller = controllers.get(interrupt.turn_id);
    if (controller && !controller.signal.aborted) controller.abort(new TurnInterruptedError(interrupt));
  };
  client.on("turn/start", onStart);
  client.on("turn/interrupt", onInterrupt);

  return {
    active,
    idle: () => (active.size === 0 ? Promise.resolve() : new Promise<void>((resolve) => idleWaiters.push(resolve))),
    stop: () => {
      client.off("turn/start", onStart);
      client.off("turn/interrupt", onInterrupt);
      for (const [turnId, controller] of controllers) {
        const start = active.get(turnId)!;
        controller.abort(
          new TurnInterruptedError({ agent_id: start.agent_id, turn_id: turnId, cause: { kind: "shutdown" } }),
        );
      }
    },
  };
}
