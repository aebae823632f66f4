/** A small typed event emitter: `on` returns the function that removes the listener. */
export class Emitter<Events extends object> {
  private readonly handlers = new Map<keyof Events, Set<(value: never) => void>>();

  on<K extends keyof Events>(name: K, handler: (value: Events[K]) => void): () => void {
    let set = this.handlers.get(name);
    if (!set) this.handlers.set(name, (set = new Set()));
    set.add(handler as (value: never) => void);
    return () => this.off(name, handler);
  }

  off<K extends keyof Events>(name: K, handler: (value: Events[K]) => void): void {
    this.handlers.get(name)?.delete(handler as (value: never) => void);
  }

  /** Whether anyone listens to `name`. */
  listens(name: keyof Events): boolean {
    return (this.handlers.get(name)?.size ?? 0) > 0;
  }

  /** Calls every listener; one that throws is reported (reportError) and does not stop the rest. */
  protected emit<K extends keyof Events>(name: K, value: Events[K]): void {
    for (const handler of [...(this.handlers.get(name) ?? [])]) {
      try {
        (handler as (value: Events[K]) => void)(value);
      } catch (err) {
        this.listenerFailed(err);
      }
    }
  }

  /** Where a listener's exception goes: the page's error reporting, as an uncaught error would. */
  protected listenerFailed(err: unknown): void {
    const report = (globalThis as { reportError?: (err: unknown) => void }).reportError;
    if (report) report(err);
    else console.error(err);
  }
}
