/**
 * Request bodies: read under a per-request limit, a budget shared by every body being read at once, an idle
 * timeout and a total timeout; and the end of a connection whose answer went out before its body was read
 * (an early refusal: 413, 415, 401, 503...).
 *
 * An early refusal must stay readable by a client that is still sending. Closing a socket with unread bytes in
 * its receive buffer makes the kernel send a reset, and a reset throws away whatever the client had not read
 * yet, our answer included (Node's fetch then sees `EPIPE` or `ECONNRESET`; the `openai` client retries, which
 * uploads the body again). So after such an answer the rest of the body is read and discarded: a body of at most
 * `LINGER_BYTES` more keeps its keep-alive connection; a longer (or unbounded, chunked) one gets a half-close (FIN
 * after the answer, the client reads the answer and the end) and is discarded until the client closes, up to
 * `LINGER_BYTES` or `LINGER_MS`, whichever comes first, and only then is the socket destroyed.
 */
import type http from "node:http";
import type { Socket } from "node:net";
import { ApiError, invalidRequest } from "./errors.js";

/** What a connection reads and discards after an early answer before it is closed. */
export const LINGER_BYTES = 64 * 1024 * 1024;
/** How long a connection may keep sending a body after its answer was sent, before it is closed. */
export const LINGER_MS = 5_000;

export interface BodyLimits {
  /** Largest body of one request (413 beyond). */
  maxBodyBytes: number;
  /** Bytes of all bodies being read at once (503 beyond). */
  maxBodyBytesInFlight: number;
  /** Longest wait for the next bytes of a body (408 beyond). */
  bodyIdleTimeoutMs: number;
  /** Longest time to receive one whole body (408 beyond). */
  bodyTimeoutMs: number;
}

/** Reads request bodies within the limits; `inFlight` is what all readers hold now. */
export class BodyReader {
  private held = 0;

  constructor(private readonly limits: BodyLimits) {}

  /** Bytes of request bodies being read now (counted against `maxBodyBytesInFlight`). */
  get inFlight(): number {
    return this.held;
  }

  /**
   * The whole body, or an ApiError: 413 (declared or read beyond `maxBodyBytes`), 503 (the bytes in flight would
   * pass the budget), 408 (idle or total timeout), 400 (the client went away or the body broke). On an error the
   * rest of the body is left to `lingerAfterAnswer`.
   */
  read(req: http.IncomingMessage): Promise<Buffer> {
    const { maxBodyBytes, maxBodyBytesInFlight, bodyIdleTimeoutMs, bodyTimeoutMs } = this.limits;
    const tooLarge = (): ApiError =>
      new ApiError(413, "invalid_request_error", `request body is larger than ${maxBodyBytes} bytes`, null, "request_too_large");
    const declared = Number(req.headers["content-length"]);
    if (Number.isFinite(declared) && declared > maxBodyBytes) return Promise.reject(tooLarge());
    if (req.complete && req.readableLength === 0 && req.readableEnded) return Promise.resolve(Buffer.alloc(0));
    return new Promise<Buffer>((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let settled = false;
      const finish = (error: ApiError | undefined): void => {
        if (settled) return;
        settled = true;
        this.held -= size;
        clearTimeout(idle);
        clearTimeout(total);
        req.off("data", onData);
        req.off("end", onEnd);
        req.off("error", onError);
        req.off("close", onClose);
        if (error) {
          chunks.length = 0;
          reject(error);
        } else resolve(Buffer.concat(chunks, size));
      };
      const timedOut = (what: string): ApiError =>
        new ApiError(408, "invalid_request_error", `the request body did not arrive in time: ${what}`, null, "request_timeout");
      let idle = setTimeout(() => finish(timedOut(`no bytes for ${bodyIdleTimeoutMs} ms`)), bodyIdleTimeoutMs);
      const total = setTimeout(() => finish(timedOut(`not all of it within ${bodyTimeoutMs} ms`)), bodyTimeoutMs);
      const onData = (chunk: Buffer): void => {
        if (settled) return;
        if (size + chunk.length > maxBodyBytes) return finish(tooLarge());
        if (this.held + chunk.length > maxBodyBytesInFlight) {
          return finish(
            new ApiError(
              503,
              "unavailable_error",
              `the server is reading ${this.held} bytes of request bodies (at most ${maxBodyBytesInFlight} at once); retry later`,
              null,
              "server_busy",
              { "Retry-After": "1" },
            ),
          );
        }
        size += chunk.length;
        this.held += chunk.length;
        chunks.push(chunk);
        clearTimeout(idle);
        idle = setTimeout(() => finish(timedOut(`no bytes for ${bodyIdleTimeoutMs} ms`)), bodyIdleTimeoutMs);
      };
      const onEnd = (): void => finish(undefined);
      const onError = (error: Error): void => finish(invalidRequest(null, `could not read the request body: ${error.message}`, "bad_body"));
      const onClose = (): void => {
        if (!req.complete) finish(invalidRequest(null, "the client closed the connection before the body ended", "bad_body"));
      };
      req.on("data", onData);
      req.on("end", onEnd);
      req.on("error", onError);
      req.on("close", onClose);
    });
  }
}

/**
 * Once the answer to `req` is sent, reads and discards what is left of its body (see the file's comment): the
 * connection is kept when the rest is known to be at most `LINGER_BYTES`, else half-closed and destroyed once the
 * client closes, `LINGER_BYTES` more arrived or `LINGER_MS` passed. An answer that closes its connection (the
 * client sent `Connection: close`, or the server drains) is half-closed the same way: Node would end it with
 * `destroySoon`, whose destroy comes right after the answer is flushed, with the body's bytes still unread.
 * Call it once per request, before answering.
 */
export function lingerAfterAnswer(req: http.IncomingMessage, res: http.ServerResponse): void {
  const socket = req.socket as Socket & { destroySoon?: () => void };
  let halfClosed = false;
  const halfClose = (): void => {
    if (halfClosed) return;
    halfClosed = true;
    // FIN after the answer: the client reads it and the end; its own close (or the bounds) ends the socket
    if (!socket.destroyed && !socket.writableEnded) socket.end();
  };
  // Node calls destroySoon on a closing connection once the answer is flushed (before "finish" reaches us)
  const ownDestroySoon = Object.hasOwn(socket, "destroySoon");
  if (!ownDestroySoon && typeof socket.destroySoon === "function") {
    socket.destroySoon = function (this: Socket) {
      if (req.complete || req.destroyed) {
        delete (socket as { destroySoon?: unknown }).destroySoon;
        socket.destroySoon?.();
      } else halfClose();
    };
  }
  const restore = (): void => {
    if (!ownDestroySoon) delete (socket as { destroySoon?: unknown }).destroySoon;
  };
  res.once("close", restore);
  res.once("finish", () => {
    restore();
    if (req.complete || req.destroyed) return;
    const declared = Number(req.headers["content-length"]);
    let discarded = 0;
    const close = (): void => {
      clearTimeout(timer);
      if (!socket.destroyed) socket.destroy();
    };
    req.on("data", (chunk: Buffer) => {
      discarded += chunk.length;
      if (discarded > LINGER_BYTES) close();
    });
    req.once("end", () => {
      clearTimeout(timer);
      if (halfClosed) close();
    });
    socket.once("close", () => clearTimeout(timer));
    const timer = setTimeout(close, LINGER_MS);
    timer.unref();
    req.resume();
    if (!(Number.isFinite(declared) && declared <= LINGER_BYTES)) halfClose();
  });
}
