import {
  type GraphQLField,
  type GraphQLSchema,
  getDirectiveValues,
  getNullableType,
  isIntrospectionType,
  isObjectType,
} from 'graphql';
import { isDuration, MAX_DURATION_MS } from '../core/run-idempotent.js';

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

/** How one root mutation field is made idempotent. */
export interface IdempotentField {
  /** From `@idempotent(required:)`; `undefined` when the field only has the key argument. */
  required?: boolean;
  /** From `@idempotent(ttlMs:)`. */
  ttlMs?: number;
  /** From `@idempotent(mode:)`. */
  mode?: 'transactional' | 'lease';
  /** From `@idempotent(leaseMs:)`. */
  leaseMs?: number;
}

/** The `IdempotencyMode` enum's values, as `runIdempotent` names the modes. */
const modes = new Map<unknown, IdempotentField['mode']>([
  ['TRANSACTIONAL', 'transactional'],
  ['LEASE', 'lease'],
]);

/**
 * The root mutation fields that are idempotent: those with the key argument or `@idempotent`.
 * Throws one error naming every misdeclared field: `@idempotent` without the key argument, a key
 * argument that is not a `String`, or `@idempotent` outside the mutation root.
 */
export function idempotentFieldsOf(
  schema: GraphQLSchema,
  argumentName: string,
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
      if (type !== mutationType) {
        if (marked)
          problems.push(`${coordinate}: @idempotent applies only to fields of the mutation root type`);
        continue;
      }
      const keyArgument = field.args.find((arg) => arg.name === argumentName);
      if (!keyArgument) {
        if (marked) problems.push(`${coordinate}: @idempotent needs an argument "${argumentName}: String"`);
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
      const values = marked && directive && field.astNode ? getDirectiveValues(directive, field.astNode) : {};
      const declared: IdempotentField = {
        required: typeof values?.required === 'boolean' ? values.required : undefined,
        ttlMs: typeof values?.ttlMs === 'number' ? values.ttlMs : undefined,
        mode: modes.get(values?.mode),
        leaseMs: typeof values?.leaseMs === 'number' ? values.leaseMs : undefined,
      };
      const problem = problemOf(declared, values?.mode);
      if (problem) {
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

/** What is wrong with a field's `@idempotent` arguments, if anything. */
function problemOf(field: IdempotentField, mode: unknown): string | undefined {
  if (field.ttlMs !== undefined && !isDuration(field.ttlMs)) return `@idempotent(ttlMs:) ${DURATION}`;
  // A schema with an enum of its own (or enum values mapped by resolvers) could pass anything.
  if (mode !== undefined && mode !== null && field.mode === undefined) {
    return `@idempotent(mode:) must be TRANSACTIONAL or LEASE (got ${String(mode)})`;
  }
  if (field.leaseMs !== undefined && !isDuration(field.leaseMs)) return `@idempotent(leaseMs:) ${DURATION}`;
  if (field.leaseMs !== undefined && field.mode === 'transactional') {
    return '@idempotent(leaseMs:) applies only with mode: LEASE';
  }
  return undefined;
}
