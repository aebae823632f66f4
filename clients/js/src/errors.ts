/** An error from the server (its `code`, `message` and `param`) or from the connection. */
export class VoiceError extends Error {
  readonly code: string;
  readonly param: string | undefined;
  readonly fatal: boolean;

  constructor(code: string, message: string, param?: string, fatal = false) {
    super(message);
    this.name = "VoiceError";
    this.code = code;
    this.param = param;
    this.fatal = fatal;
  }
}
