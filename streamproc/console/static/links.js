// Which URLs from the data the console shows may become links. A finding's advisory link
// comes from the scanner's report, so it is untrusted: only an absolute https: or http: URL
// is a link (rendered as parsed, normalized); javascript:, data:, a relative path or
// anything else that does not parse stays text.

export function externalHref(value) {
  if (typeof value !== "string") return null;
  let url;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
}

// An href the console may set: its own routes (#/...) or an external http(s) URL.
export function safeHref(value) {
  return typeof value === "string" && value.startsWith("#") ? value : externalHref(value);
}
