/**
 * Query parameters (and libpq `key=value` settings) that carry a credential: `password`,
 * `sslpassword`, Accelerate's `api_key`, tokens, secrets. Their values never reach a message.
 */
const SECRET_PARAMETER = /pass|pwd|secret|token|key|auth|credential|signature/i;

/**
 * `?name=value`, `&name=value`, `;name=value` or a libpq ` name=value`, whose value may be quoted
 * (`password='hunter 2'`, with `\'` and `\\` escapes).
 */
const PARAMETER = /([?&;\s]|^)([A-Za-z_][\w.-]*)=('(?:[^'\\]|\\.)*'?|[^&#;\s]*)/g;

/**
 * A URL's scheme and user info: everything up to the last `@` before the first `/`, as MariaDB's
 * driver reads it, so a password may hold `@`, `?` or `#` (`mysql://app:hun#ter2@db/app`); or, with
 * no `@` before the first `/`, up to the last `@` before any `?` or `#` that a host follows, so a
 * password may hold `/` too (`postgresql://app:s3cr/etPw@db/app`, a generated password unencoded).
 */
const USER_INFO = /^([a-z][a-z0-9+.-]*:\/\/)([^/]*)@/i;
const USER_INFO_WITH_SLASH = /^([a-z][a-z0-9+.-]*:\/\/)([^?#]*)@(?=[^@/?#]*(?:[/?#]|$))/i;
const userInfoOf = (url: string) => USER_INFO.exec(url) ?? USER_INFO_WITH_SLASH.exec(url);

/**
 * The URL with every credential in it replaced by `***`: the password of its user info and the
 * value of every secret query parameter (`?password=`, `?api_key=` of a `prisma+postgres://` URL,
 * …). The rest stays as written, so the message still says which database was meant.
 */
export function redact(url: string): string {
  const found = userInfoOf(url);
  const withoutPassword = found ? `${found[1]}${userOf(found[2]!)}@${url.slice(found[0].length)}` : url;
  return withoutPassword.replace(PARAMETER, (whole, before: string, name: string, value: string) =>
    SECRET_PARAMETER.test(name) && value ? `${before}${name}=***` : whole,
  );
}

/** User info with its password, if it has one, as `***`. */
function userOf(userInfo: string): string {
  const colon = userInfo.indexOf(':');
  return colon < 0 ? userInfo : `${userInfo.slice(0, colon)}:***`;
}

/** A URL inside free text: from its scheme to the next whitespace, less a closing quote. */
const URL_IN_TEXT = /[a-z][a-z0-9+.-]*:\/\/\S*?(?=['"]?(\s|$))/gi;

/**
 * `text` with every URL in it as `redact` writes it, for a message that repeats what it was given
 * (a command line's mistyped option): each word is a URL from its `scheme://` on.
 */
export function redactUrlsIn(text: string): string {
  return text.replace(URL_IN_TEXT, (url) => redact(url));
}

/**
 * `text` (an error message) with every credential of `url` hidden: the URL itself as `redact`
 * writes it, and each secret value wherever a driver may have echoed it (raw or percent-decoded).
 */
export function redactSecretsOf(url: string, text: string): string {
  let hidden = text.split(url).join(redact(url));
  for (const secret of secretsOf(url)) hidden = hidden.split(secret).join('***');
  return hidden;
}

/** The credential values in a URL, longest first, both as written and percent-decoded. */
function secretsOf(url: string): string[] {
  const found = new Set<string>();
  const add = (value: string) => {
    // A one- or two-character value would blank out unrelated text; the URL itself is redacted anyway.
    for (const form of [value, safeDecode(value)]) if (form.length >= 3) found.add(form);
  };
  const userInfo = userInfoOf(url)?.[2];
  const colon = userInfo?.indexOf(':') ?? -1;
  if (userInfo && colon >= 0) add(userInfo.slice(colon + 1));
  for (const [, , name, value] of url.matchAll(PARAMETER)) {
    if (name && value && SECRET_PARAMETER.test(name)) add(value);
  }
  return [...found].sort((a, b) => b.length - a.length);
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value.replace(/\+/g, ' '));
  } catch {
    return value;
  }
}
