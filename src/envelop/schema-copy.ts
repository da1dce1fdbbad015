import {
  type GraphQLArgumentConfig,
  GraphQLDirective,
  type GraphQLFieldConfig,
  type GraphQLFieldResolver,
  GraphQLInputObjectType,
  type GraphQLInputType,
  GraphQLInterfaceType,
  GraphQLList,
  type GraphQLNamedType,
  GraphQLNonNull,
  type GraphQLNullableType,
  GraphQLObjectType,
  GraphQLSchema,
  type GraphQLType,
  GraphQLUnionType,
  isInputObjectType,
  isInterfaceType,
  isIntrospectionType,
  isListType,
  isNonNullType,
  isObjectType,
  isSpecifiedDirective,
  isUnionType,
} from 'graphql';

/** Chooses the resolver of one field of the copy, given the field's type and its own resolver. */
export type ResolverOf = (
  type: GraphQLObjectType,
  fieldName: string,
  resolve: GraphQLFieldResolver<unknown, unknown> | undefined,
) => GraphQLFieldResolver<unknown, unknown> | undefined;

/**
 * A copy of `schema` whose object types, interfaces, unions and input types are new objects that
 * refer to each other (so a type reachable from itself, such as a mutation type with a field
 * returning it, is copied once), with each object field's resolver chosen by `resolverOf`.
 * Everything else (descriptions, defaults, directives on the SDL, `extensions`, `isTypeOf`,
 * `resolveType`, field and type order) is kept; scalars and enums, which refer to no other type,
 * are shared. `schema` and its types are left untouched.
 */
export function copySchema(schema: GraphQLSchema, resolverOf: ResolverOf): GraphQLSchema {
  const copies = new Map<string, GraphQLNamedType>();
  const named = <T extends GraphQLNamedType>(type: T): T => (copies.get(type.name) as T | undefined) ?? type;
  const ref = <T extends GraphQLType>(type: T): T => {
    if (isListType(type)) return new GraphQLList(ref(type.ofType)) as T;
    if (isNonNullType(type)) return new GraphQLNonNull(ref(type.ofType) as GraphQLNullableType) as T;
    return named(type as GraphQLNamedType) as T;
  };
  const args = (map: Record<string, GraphQLArgumentConfig> | undefined) =>
    map && mapValues(map, (arg) => ({ ...arg, type: ref(arg.type) as GraphQLInputType }));
  const fields = (
    map: Record<string, GraphQLFieldConfig<unknown, unknown>>,
    resolve: (
      name: string,
      field: GraphQLFieldConfig<unknown, unknown>,
    ) => GraphQLFieldConfig<unknown, unknown>['resolve'],
  ) =>
    mapValues(map, (field, name) => ({
      ...field,
      type: ref(field.type),
      args: args(field.args),
      resolve: resolve(name, field),
    }));

  function copyOf(type: GraphQLNamedType): GraphQLNamedType {
    if (isIntrospectionType(type)) return type;
    if (isObjectType(type)) {
      const config = type.toConfig();
      return new GraphQLObjectType({
        ...config,
        interfaces: () => config.interfaces.map(named),
        fields: () => fields(config.fields, (name, field) => resolverOf(type, name, field.resolve)),
      });
    }
    if (isInterfaceType(type)) {
      const config = type.toConfig();
      return new GraphQLInterfaceType({
        ...config,
        interfaces: () => config.interfaces.map(named),
        fields: () => fields(config.fields, (_, field) => field.resolve),
      });
    }
    if (isUnionType(type)) {
      const config = type.toConfig();
      return new GraphQLUnionType({ ...config, types: () => config.types.map(named) });
    }
    if (isInputObjectType(type)) {
      const config = type.toConfig();
      return new GraphQLInputObjectType({
        ...config,
        fields: () => mapValues(config.fields, (field) => ({ ...field, type: ref(field.type) })),
      });
    }
    return type;
  }

  for (const type of Object.values(schema.getTypeMap())) copies.set(type.name, copyOf(type));
  const config = schema.toConfig();
  const root = (type: GraphQLObjectType | null | undefined) => (type ? named(type) : type);
  return new GraphQLSchema({
    ...config,
    query: root(config.query),
    mutation: root(config.mutation),
    subscription: root(config.subscription),
    types: [...copies.values()],
    directives: config.directives.map((directive) => {
      if (isSpecifiedDirective(directive)) return directive;
      const { args: directiveArgs, ...rest } = directive.toConfig();
      return new GraphQLDirective({ ...rest, args: args(directiveArgs) });
    }),
  });
}

function mapValues<T, U>(map: Record<string, T>, f: (value: T, key: string) => U): Record<string, U> {
  return Object.fromEntries(Object.entries(map).map(([key, value]) => [key, f(value, key)]));
}
