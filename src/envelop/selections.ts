import {
  type DocumentNode,
  type FieldNode,
  type FragmentDefinitionNode,
  type GraphQLNamedType,
  type GraphQLObjectType,
  type GraphQLSchema,
  getNamedType,
  isAbstractType,
  isInterfaceType,
  isObjectType,
  Kind,
  type OperationDefinitionNode,
  type SelectionSetNode,
} from 'graphql';

/** Where an operation selects an idempotent field of the mutation type. */
export interface IdempotentSelection {
  /** The field's name on the mutation type. */
  fieldName: string;
  /** Selected as a root field of a mutation operation (not below another field, nor in a query). */
  atRoot: boolean;
  /** The selection itself, with its arguments. */
  node: FieldNode;
}

/**
 * Every place `operation` may run one of `idempotentFields` (fields of the mutation type), through
 * fragments and inline fragments, and through interfaces and unions the mutation type belongs to.
 * `@skip` and `@include` are not evaluated: a field they may leave out still counts.
 */
export function idempotentSelections(
  schema: GraphQLSchema,
  document: DocumentNode,
  operation: OperationDefinitionNode,
  idempotentFields: Pick<ReadonlySet<string>, 'has' | 'size'>,
): IdempotentSelection[] {
  const mutationType = schema.getMutationType();
  if (!mutationType || idempotentFields.size === 0) return [];
  const fragments = fragmentsOf(document);
  const found: IdempotentSelection[] = [];
  // A fragment's fields depend only on the fragment and on whether it is spread at the root.
  const walked = new Set<string>();

  const mayBeMutation = (type: GraphQLNamedType | undefined) =>
    type === mutationType || (isAbstractType(type) && schema.isSubType(type, mutationType));

  const walk = (selectionSet: SelectionSetNode, parent: GraphQLNamedType | undefined, atRoot: boolean) => {
    for (const selection of selectionSet.selections) {
      if (selection.kind === Kind.FIELD) {
        const name = selection.name.value;
        // Execution finds a field on the runtime type: where that may be the mutation type, its field
        // counts even when the fragment's type does not declare it (a document nobody validated).
        const field =
          (isObjectType(parent) || isInterfaceType(parent) ? parent.getFields()[name] : undefined) ??
          (mayBeMutation(parent) ? mutationType.getFields()[name] : undefined);
        if (!field) continue; // __typename, or a field validation has already refused
        if (idempotentFields.has(name) && mayBeMutation(parent))
          found.push({ fieldName: name, atRoot, node: selection });
        if (selection.selectionSet) walk(selection.selectionSet, getNamedType(field.type), false);
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        const condition = selection.typeCondition && schema.getType(selection.typeCondition.name.value);
        walk(selection.selectionSet, condition ?? parent, atRoot);
      } else {
        const fragment = fragments.get(selection.name.value);
        const id = `${selection.name.value}\u0000${atRoot}`;
        if (!fragment || walked.has(id)) continue;
        walked.add(id);
        walk(fragment.selectionSet, schema.getType(fragment.typeCondition.name.value), atRoot);
      }
    }
  };
  const root: GraphQLObjectType | null | undefined = schema.getRootType(operation.operation);
  walk(operation.selectionSet, root ?? undefined, operation.operation === 'mutation');
  return found;
}

/**
 * The path (`orders.create`) of the first field below the root of `operation` that is given an
 * `argumentName` argument, through the fragments it spreads; `undefined` when there is none. Only
 * root fields' keys are read: such a key would key nothing (a namespaced mutation,
 * `mutation { orders { create(…, idempotencyKey: "k") } }`).
 */
export function keyArgumentBelowRoot(
  document: DocumentNode,
  operation: OperationDefinitionNode,
  argumentName: string,
): string | undefined {
  const fragments = fragmentsOf(document);
  const walked = new Set<string>();
  const find = (selectionSet: SelectionSetNode | undefined, path: string): string | undefined => {
    for (const selection of selectionSet?.selections ?? []) {
      let found: string | undefined;
      if (selection.kind === Kind.FIELD) {
        const at = path ? `${path}.${selection.name.value}` : selection.name.value;
        if (path && selection.arguments?.some(({ name }) => name.value === argumentName)) return at;
        found = find(selection.selectionSet, at);
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        found = find(selection.selectionSet, path);
      } else {
        const id = `${selection.name.value}\u0000${path === ''}`;
        if (walked.has(id)) continue;
        walked.add(id);
        found = find(fragments.get(selection.name.value)?.selectionSet, path);
      }
      if (found !== undefined) return found;
    }
    return undefined;
  };
  return find(operation.selectionSet, '');
}

/**
 * Whether `operation` asks for incremental delivery anywhere, through the fragments it spreads:
 * `@defer` on a fragment, `@stream` on a field (`if: false` counts too: it is not evaluated here).
 */
export function defersOrStreams(document: DocumentNode, operation: OperationDefinitionNode): boolean {
  const fragments = fragmentsOf(document);
  const walked = new Set<string>();
  const incremental = (selectionSet: SelectionSetNode | undefined): boolean =>
    selectionSet?.selections.some((selection) => {
      if (selection.directives?.some(({ name }) => name.value === 'defer' || name.value === 'stream')) {
        return true;
      }
      if (selection.kind !== Kind.FRAGMENT_SPREAD) return incremental(selection.selectionSet);
      const name = selection.name.value;
      if (walked.has(name)) return false;
      walked.add(name);
      return incremental(fragments.get(name)?.selectionSet);
    }) ?? false;
  return incremental(operation.selectionSet);
}

/**
 * Whether the mutation type's fields can be reached other than at the root of a mutation: a field
 * of the schema (or a union) returns it, or it is the query or subscription root as well.
 */
export function mutationTypeIsNested(schema: GraphQLSchema): boolean {
  const mutationType = schema.getMutationType();
  if (!mutationType) return false;
  if (schema.getQueryType() === mutationType || schema.getSubscriptionType() === mutationType) return true;
  for (const type of Object.values(schema.getTypeMap())) {
    if (!isObjectType(type) && !isInterfaceType(type)) continue;
    for (const field of Object.values(type.getFields())) {
      const returned = getNamedType(field.type);
      if (returned === mutationType || (isAbstractType(returned) && schema.isSubType(returned, mutationType)))
        return true;
    }
  }
  return false;
}

/** The fragments `document` defines, by name. */
function fragmentsOf(document: DocumentNode): Map<string, FragmentDefinitionNode> {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions) {
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  }
  return fragments;
}
