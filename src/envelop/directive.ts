import {
  type GraphQLField,
  type GraphQLSchema,
  getDirectiveValues,
  getNullableType,
  isIntrospectionType,
  isObjectType,
} from 'graphql';
import { isDuration, MAX_DURATION_MS } from '../core/run-idempotent.js';
import type { IdempotencyMode } from '../core/unrecorded.js';

/**
 * The SDL of the `@idempotent` directive and its `IdempotencyMode` enum; add it to your type
 * definitions. A root mutation field marked with it needs an `idempotencyKey: String` argument
 * (the plugin's `argumentName`).
 *
 * - `required`: a call without a key is rejected with `IDEMPOTENCY_KEY_MISSING` (else it runs
 *   normally, without a record).
 * - `ttlMs`: how long this field's results are replayed, overriding the plugin's `ttlMs`. Like
 *   `leaseMs`, a whole number of milliseconds up to a hundred years: a `Float`, as GraphQL's `Int`
 *   ends at about 24.8 days.
 * - `mode`: `TRANSACTIONAL` or `LEASE`, overriding the plugin's `mode`. Under `LEASE` the
 *   resolver's `context.tx` is the store's plain client, not a transaction: its writes commit on
 *   their own, and a duplicate during the lease waits for the result (then 409, after `waitTimeoutMs`).
 * - `leaseMs`: how long the lease is held, overriding the plugin's `leaseMs`.
 *
 * These apply to field-level keys; an operation under an `Idempotency-Key` header runs in the
 * plugin's mode, and one selecting a field whose `mode` differs from it is refused.
 */
export const idempotentDirectiveTypeDefs = /* GraphQL */ `
  """
  How an idempotent mutation runs: TRANSACTIONAL (its writes commit with the idempotency record) or
  LEASE (the key is leased first, for effects outside the database).
  """
  enum IdempotencyMode {
    TRANSACTIONAL
    LEASE
  }

  """
  Runs this mutation at most once per idempotency key and replays its stored result to every retry.
  """
  directive @idempotent(
    required: Boolean = true
    ttlMs: Float
    mode: IdempotencyMode
    leaseMs: Float
  ) on FIELD_DEFINITION
`;

/**
 * How one root mutation field is made idempotent: the arguments of its `@idempotent`, or, in a
 * schema built in code (graphql-js, Pothos), the field's `extensions.idempotent`, which
 * takes these members (or `true`, as a bare `@idempotent`).
 */
export interface IdempotentField {
  /**
   * A call without a key is rejected with `IDEMPOTENCY_KEY_MISSING`. `true` when declared and not
   * given; `undefined` when the field only has the key argument (a keyless call runs unrecorded).
   */
  required?: boolean | undefined;
  /** How long this field's results are replayed, overriding the plugin's `ttlMs`. */
  ttlMs?: number | undefined;
  /** Overrides the plugin's `mode`. */
  mode?: 'transactional' | 'lease' | undefined;
  /** How long the lease is held (`mode: 'lease'` only), overriding the plugin's `leaseMs`. */
  leaseMs?: number | undefined;
}

/** The `IdempotencyMode` enum's values, as `runIdempotent` names the modes. */
const modes = new Map<unknown, IdempotentField['mode']>([
  ['TRANSACTIONAL', 'transactional'],
  ['LEASE', 'lease'],
]);

/** How a declaration names its arguments in an error: the directive's or the extension's. */
interface Declaration {
  name: string;
  argument(name: string): string;
  modes: string;
  lease: string;
}

const byDirective: Declaration = {
  name: '@idempotent',
  argument: (name) => `@idempotent(${name}:)`,
  modes: 'TRANSACTIONAL or LEASE',
  lease: 'mode: LEASE',
};

const byExtension: Declaration = {
  name: 'extensions.idempotent',
  argument: (name) => `extensions.idempotent.${name}`,
  modes: "'transactional' or 'lease'",
  lease: "mode: 'lease'",
};

/**
 * The root mutation fields that are idempotent: those with the key argument, `@idempotent` or
 * `extensions.idempotent`. Throws one error naming every misdeclared field: a declaration without
 * the key argument, a key argument that is not a `String`, a declaration outside the mutation root
 * or with arguments out of range.
 */
export function idempotentFieldsOf(
  schema: GraphQLSchema,
  argumentName: string,
  /** The mode of a field that declares none: the plugin's, else the store's, else transactional. */
  defaultMode: IdempotencyMode = 'transactional',
): Map<GraphQLField<unknown, unknown>, IdempotentField> {
  const directive = schema.getDirective('idempotent');
  const mutationType = schema.getMutationType();
  const fields = new Map<GraphQLField<unknown, unknown>, IdempotentField>();
  const problems: string[] = [];

  for (const type of Object.values(schema.getTypeMap())) {
    if (!isObjectType(type) || isIntrospectionType(type)) continue;
    for (const field of Object.values(type.getFields())) {
      const coordinate = `${type.name}.${field.name}`;
      const marked = field.astNode?.directives?.some((d) => d.name.value === 'idempotent') ?? false;
      const extension = field.extensions?.idempotent;
      const declaration = marked ? byDirective : extension !== undefined ? byExtension : undefined;
      if (marked && !directive) {
        // A schema built without validating its SDL (assumeValidSDL) would drop the arguments.
        problems.push(
          `${coordinate}: @idempotent is used but not declared: add idempotentDirectiveTypeDefs to the type definitions`,
        );
        continue;
      }
      if (marked && extension !== undefined) {
        problems.push(`${coordinate}: declared by both @idempotent and extensions.idempotent; keep one`);
        continue;
      }
      if (type !== mutationType) {
        if (declaration)
          problems.push(
            `${coordinate}: ${declaration.name} applies only to fields of the mutation root type`,
          );
        continue;
      }
      const keyArgument = field.args.find((arg) => arg.name === argumentName);
      if (!keyArgument) {
        if (declaration)
          problems.push(`${coordinate}: ${declaration.name} needs an argument "${argumentName}: String"`);
        continue;
      }
      const keyType = getNullableType(keyArgument.type);
      if (String(keyType) !== 'String') {
        problems.push(
          `${coordinate}: the "${argumentName}" argument must be a String (it is ${keyArgument.type})`,
        );
        continue;
      }
      if (keyArgument.defaultValue !== undefined && keyArgument.defaultValue !== null) {
        // Every call that sent no key would run under that one key, and replay the first's result.
        problems.push(`${coordinate}: the "${argumentName}" argument must have no default value`);
        continue;
      }
      const declared =
        declaration === byExtension
          ? fromExtension(extension)
          : marked && directive && field.astNode
            ? fromDirective(getDirectiveValues(directive, field.astNode))
            : {};
      const problem =
        typeof declared === 'string'
          ? declared
          : problemOf(declared, declaration ?? byDirective, defaultMode);
      if (problem !== undefined || typeof declared === 'string') {
        problems.push(`${coordinate}: ${problem}`);
        continue;
      }
      fields.set(field, declared);
    }
  }
  if (problems.length > 0) {
    throw new Error(`useIdempotency: misdeclared idempotent fields\n  ${problems.join('\n  ')}`);
  }
  return fields;
}

const DURATION = `must be an integer from 1 to ${MAX_DURATION_MS} (a hundred years)`;

/** A field's `@idempotent` arguments, or what is wrong with them. */
function fromDirective(values: Record<string, unknown> | undefined): IdempotentField | string {
  const mode = modes.get(values?.mode);
  if (values?.mode != null && mode === undefined) {
    // A schema with an enum of its own (or enum values mapped by resolvers) could pass anything.
    return `@idempotent(mode:) must be ${byDirective.modes} (got ${String(values.mode)})`;
  }
  return {
    required: typeof values?.required === 'boolean' ? values.required : undefined,
    ttlMs: typeof values?.ttlMs === 'number' ? values.ttlMs : undefined,
    mode,
    leaseMs: typeof values?.leaseMs === 'number' ? values.leaseMs : undefined,
  };
}

const EXTENSION_MEMBERS = new Set(['required', 'ttlMs', 'mode', 'leaseMs']);

/** A field's `extensions.idempotent` (`true` or an `IdempotentField`), or what is wrong with it. */
function fromExtension(value: unknown): IdempotentField | string {
  if (value === true) return { required: true };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return `extensions.idempotent must be true or an object of required, ttlMs, mode and leaseMs (got ${JSON.stringify(value) ?? String(value)})`;
  }
  const given = value as Record<string, unknown>;
  const unknown = Object.keys(given).filter((name) => !EXTENSION_MEMBERS.has(name));
  if (unknown.length > 0) {
    return `extensions.idempotent has no ${unknown.join(', ')} (it takes required, ttlMs, mode and leaseMs)`;
  }
  const { required = true, ttlMs, mode, leaseMs } = given;
  if (typeof required !== 'boolean') return 'extensions.idempotent.required must be a boolean';
  if (mode !== undefined && mode !== 'transactional' && mode !== 'lease') {
    return `extensions.idempotent.mode must be ${byExtension.modes} (got ${String(mode)})`;
  }
  for (const [name, ms] of [
    ['ttlMs', ttlMs],
    ['leaseMs', leaseMs],
  ] as const) {
    if (ms !== undefined && typeof ms !== 'number') return `extensions.idempotent.${name} ${DURATION}`;
  }
  return { required, ttlMs: ttlMs as number | undefined, mode, leaseMs: leaseMs as number | undefined };
}

/** What is wrong with a field's declared arguments, if anything. */
function problemOf(
  field: IdempotentField,
  { argument, lease }: Declaration,
  defaultMode: IdempotencyMode,
): string | undefined {
  if (field.ttlMs !== undefined && !isDuration(field.ttlMs)) return `${argument('ttlMs')} ${DURATION}`;
  if (field.leaseMs !== undefined && !isDuration(field.leaseMs)) return `${argument('leaseMs')} ${DURATION}`;
  if (field.leaseMs !== undefined && field.mode === 'transactional') {
    return `${argument('leaseMs')} applies only with ${lease}`;
  }
  // Without a mode of its own the field runs in the default one, where a `leaseMs` would be ignored.
  if (field.leaseMs !== undefined && field.mode === undefined && defaultMode !== 'lease') {
    return `leaseMs applies only in lease mode, and the field runs in transactional mode (the plugin's and the store's default): declare its mode as lease too`;
  }
  return undefined;
}
