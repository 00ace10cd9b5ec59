// DPoP (RFC 9449) for the console: a non-extractable ECDSA P-256 key made with WebCrypto and
// kept in this browser's IndexedDB (the page can sign with it, nobody can read it out), ES256
// proofs for every API call, and the gateway's DPoP-Nonce.

const DB_NAME = "streamproc-console";
const STORE = "keys";
const KEY_ID = "dpop";
const enc = new TextEncoder();
let keyPromise = null;
let nonce = null;

export class DpopUnavailable extends Error {}

export function b64url(bytes) {
  let bin = "";
  for (const b of new Uint8Array(bytes)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function sha256(text) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", enc.encode(text)));
}

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

function openDb() {
  const req = indexedDB.open(DB_NAME, 1);
  req.onupgradeneeded = () => req.result.createObjectStore(STORE);
  return request(req);
}

async function stored(db) {
  return request(db.transaction(STORE).objectStore(STORE).get(KEY_ID));
}

async function loadOrCreate() {
  if (!globalThis.isSecureContext || !globalThis.crypto?.subtle || !globalThis.indexedDB) {
    throw new DpopUnavailable(
      "this page cannot keep a signing key: open the console over HTTPS or on localhost / 127.0.0.1",
    );
  }
  const db = await openDb();
  let pair = await stored(db);
  if (!pair) {
    const made = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, false, ["sign", "verify"]);
    try {
      // add(), not put(): a second tab making its key at the same moment keeps the first one.
      await request(db.transaction(STORE, "readwrite").objectStore(STORE).add(made, KEY_ID));
      pair = made;
    } catch {
      pair = await stored(db);
    }
  }
  const { crv, kty, x, y } = await crypto.subtle.exportKey("jwk", pair.publicKey);
  const jwk = { crv, kty, x, y }; // RFC 7638: the required members, in lexicographic order
  return { privateKey: pair.privateKey, jwk, jkt: b64url(await sha256(JSON.stringify(jwk))) };
}

/** This browser's key: { privateKey (non-extractable), jwk (public), jkt (RFC 7638 thumbprint) }. */
export function dpopKey() {
  keyPromise ||= loadOrCreate().catch((e) => {
    keyPromise = null;
    throw e;
  });
  return keyPromise;
}

/** A fresh proof for one request (htu: the URL without query or fragment). */
export async function proof(method, url, token) {
  const key = await dpopKey();
  const u = new URL(url);
  const claims = {
    jti: crypto.randomUUID(),
    htm: method.toUpperCase(),
    htu: u.origin + u.pathname,
    iat: Math.floor(Date.now() / 1000),
    ath: b64url(await sha256(token)),
  };
  if (nonce) claims.nonce = nonce;
  const header = { alg: "ES256", typ: "dpop+jwt", jwk: key.jwk };
  const input = `${b64url(enc.encode(JSON.stringify(header)))}.${b64url(enc.encode(JSON.stringify(claims)))}`;
  // WebCrypto's ECDSA signature is R ‖ S, 32 bytes each: exactly JWS's ES256 form.
  const sig = await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, key.privateKey, enc.encode(input));
  return `${input}.${b64url(sig)}`;
}

/** Keep the nonce a response hands out; true when the response asks to retry with it. */
export function takeNonce(resp) {
  const fresh = resp.headers.get("DPoP-Nonce");
  if (fresh) nonce = fresh;
  const challenge = resp.headers.get("WWW-Authenticate") || "";
  return resp.status === 401 && Boolean(fresh) && /error="use_dpop_nonce"/.test(challenge);
}
