"""Tests for lk.schema (CRD structural schemas: checks, pruning, defaulting, validation)."""

import copy
import unittest

from lk.schema import (
    Cause,
    apply_defaults,
    format_invalid_message,
    go_quote,
    go_value,
    prune,
    structural_errors,
    validate,
)

P = "spec.versions[0].schema.openAPIV3Schema"

CRONTAB = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["cronSpec"],
            "properties": {
                "cronSpec": {"type": "string",
                             "pattern": r"^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$"},
                "image": {"type": "string", "maxLength": 10, "minLength": 2},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                "ratio": {"type": "number", "exclusiveMinimum": True, "minimum": 0,
                          "exclusiveMaximum": True, "maximum": 1},
                "port": {"type": "integer", "format": "int32"},
                "step": {"type": "integer", "multipleOf": 5},
                "target": {"x-kubernetes-int-or-string": True},
                "tags": {"type": "array", "maxItems": 3, "minItems": 1,
                         "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "required": ["name"],
                                    "properties": {"name": {"type": "string"},
                                                   "port": {"type": "integer"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"},
                           "maxProperties": 2},
                "opt": {"type": "string", "nullable": True},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                         "properties": {"known": {"type": "object",
                                                  "properties": {"a": {"type": "string"}}}}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                             "properties": {"spec": {"type": "object",
                                                     "properties": {"x": {"type": "string"}}}}},
                "nested": {"type": "object", "default": {},
                           "properties": {"level": {"type": "string", "default": "info"},
                                          "inner": {"type": "object", "default": {},
                                                    "properties": {"n": {"type": "integer",
                                                                         "default": 7}}}}},
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def _obj(**spec):
    base = {"cronSpec": "* * * * */5"}
    base.update(spec)
    return {"apiVersion": "stable.example.com/v1", "kind": "CronTab",
            "metadata": {"name": "my-cron"}, "spec": base}


class StructuralTest(unittest.TestCase):
    def test_valid(self):
        self.assertEqual(structural_errors(CRONTAB), [])
        self.assertEqual(structural_errors({"type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True}), [])
        self.assertEqual(structural_errors({
            "type": "object", "properties": {"spec": {
                "type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                "anyOf": [{"properties": {"a": {"pattern": "^x"}}}]}}}), [])
        self.assertEqual(structural_errors({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string",
                                                                   "maxLength": 10}}}}}), [])

    CASES = [
        ({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}},
         P + ".properties[spec].type: Required value: must not be empty for specified object "
             "fields"),
        ({"properties": {"a": {"type": "string"}}},
         P + ".type: Required value: must not be empty at the root"),
        ({"type": "string"}, P + '.type: Invalid value: "string": must be object at the root'),
        ({"type": "object", "properties": {"a": {"type": "array"}}},
         P + ".properties[a].items: Required value: must be specified"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {}}}},
         P + ".properties[a].items.type: Required value: must not be empty for specified array "
             "items"),
        ({"type": "object", "properties": {"a": {"type": "foo"}}},
         P + '.properties[a].type: Unsupported value: "foo": supported values: "array", '
             '"boolean", "integer", "number", "object", "string"'),
        ({"type": "object", "properties": {"a": {"$ref": "#/definitions/x", "type": "string"}}},
         P + ".properties[a].$ref: Forbidden: $ref is not supported"),
        ({"type": "object", "definitions": {}}, P + ".definitions: Forbidden"),
        ({"type": "object", "properties": {"a": {"type": "string", "readOnly": True}}},
         "readOnly: Forbidden"),
        ({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True,
                                                 "items": {"type": "string"}}}},
         "uniqueItems: Forbidden: uniqueItems cannot be set to true"),
        ({"type": "object", "properties": {"a": {"type": "object",
                                                 "additionalProperties": False}}},
         "additionalProperties: Forbidden: additionalProperties cannot be set to false"),
        ({"type": "object", "properties": {"a": {"type": "object", "properties": {
            "b": {"type": "string"}}, "additionalProperties": {"type": "string"}}}},
         "additionalProperties and properties are mutual exclusive"),
        ({"type": "object", "properties": {"a": {"type": "string",
                                                 "x-kubernetes-int-or-string": True}}},
         'type: Invalid value: "string": must be empty if x-kubernetes-int-or-string is true'),
        ({"type": "object", "properties": {"a": {"type": "object",
                                                 "x-kubernetes-preserve-unknown-fields": False}}},
         "x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"),
        ({"type": "object", "properties": {"a": {"type": "string",
                                                 "x-kubernetes-embedded-resource": True}}},
         "must be object if x-kubernetes-embedded-resource is true"),
        ({"type": "object", "properties": {"a": {
            "type": "array", "x-kubernetes-list-type": "map",
            "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}},
         "x-kubernetes-list-map-keys: Required value"),
        ({"type": "object", "properties": {"a": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["z"],
            "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}},
         "entries must all be names of item properties"),
        ({"type": "object", "properties": {"a": {"type": "string",
                                                 "x-kubernetes-list-type": "set"}}},
         "must only be used if type is array"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"},
                                                 "x-kubernetes-list-type": "bag"}}},
         'x-kubernetes-list-type: Unsupported value: "bag"'),
        ({"type": "object", "properties": {"a": {"type": "object",
                                                 "x-kubernetes-map-type": "weird"}}},
         "x-kubernetes-map-type: Unsupported value"),
        ({"type": "object", "properties": {"a": {"type": "string"}},
          "anyOf": [{"properties": {"b": {"type": "string"}}}]},
         P + ".anyOf[0].properties[b]: Required value: must be specified outside"),
        ({"type": "object", "properties": {"a": {"type": "string"}},
          "allOf": [{"properties": {"a": {"type": "string"}}}]},
         P + ".allOf[0].properties[a].type: Forbidden: must be empty to be structural"),
        ({"type": "object", "not": {"description": "x"}},
         P + ".not.description: Forbidden: must be empty to be structural"),
        ({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "labels": {"type": "object"}}}}},
         P + ".properties[metadata].properties[labels]: Forbidden: must not specify anything "
             "other than name and generateName"),
        ({"type": "object", "properties": {"a": {"type": "object", "properties": {
            "x": {"type": "string"}}, "default": {"x": "1", "y": "2"}}}},
         ".properties[a].default: Invalid value"),
        ("not a dict", P + ": Required value"),
    ]

    def test_errors(self):
        for schema, fragment in self.CASES:
            with self.subTest(fragment=fragment):
                errs = structural_errors(schema)
                self.assertTrue(any(fragment in e for e in errs), errs)

    def test_custom_path(self):
        errs = structural_errors({"type": "object", "properties": {"s": {}}}, path="root")
        self.assertEqual(errs, ["root.properties[s].type: Required value: must not be empty for "
                                "specified object fields"])


class PruneTest(unittest.TestCase):
    def test_prune(self):
        o = _obj(image="nginx", bogus=1, free={"anything": {"x": 1},
                                               "known": {"a": "1", "b": "2"}},
                 labels={"x": "y"}, ports=[{"name": "a", "port": 1, "junk": True}],
                 template={"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "p", "labels": {"a": "b"}, "weird": 1},
                           "spec": {"x": "1", "y": "2"}, "other": 3})
        o["extra"] = {"a": 1}
        o["metadata"]["junk"] = "kept at the root"
        o["status"] = {"phase": "Ok", "nope": 1}
        before = copy.deepcopy(o)
        out, unknown = prune(o, CRONTAB)
        self.assertEqual(o, before, "input mutated")
        self.assertEqual(sorted(unknown), sorted([
            "extra", "spec.bogus", "spec.free.known.b", "spec.ports[0].junk",
            "spec.template.metadata.weird", "spec.template.spec.y", "spec.template.other",
            "status.nope"]))
        self.assertEqual(out["apiVersion"], "stable.example.com/v1")
        self.assertEqual(out["metadata"], {"name": "my-cron", "junk": "kept at the root"})
        self.assertEqual(out["spec"]["free"], {"anything": {"x": 1}, "known": {"a": "1"}})
        self.assertEqual(out["spec"]["labels"], {"x": "y"})
        self.assertEqual(out["spec"]["ports"], [{"name": "a", "port": 1}])
        self.assertEqual(out["spec"]["template"], {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"x": "1"}})
        self.assertNotIn("extra", out)

    def test_preserve_root_and_additional_true(self):
        s = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        o = {"apiVersion": "v", "kind": "K", "metadata": {}, "spec": {"a": 1}}
        self.assertEqual(prune(o, s), (o, []))
        s = {"type": "object", "properties": {"m": {"type": "object",
                                                    "additionalProperties": True}}}
        self.assertEqual(prune({"m": {"a": {"b": 1}}}, s), ({"m": {"a": {"b": 1}}}, []))

    def test_type_mismatch_left_for_validation(self):
        out, unknown = prune({"spec": "oops"}, CRONTAB)
        self.assertEqual(out, {"spec": "oops"})
        self.assertEqual(unknown, [])


class DefaultTest(unittest.TestCase):
    def test_defaults(self):
        o = _obj()
        before = copy.deepcopy(o)
        out = apply_defaults(o, CRONTAB)
        self.assertEqual(o, before, "input mutated")
        self.assertEqual(out["spec"]["replicas"], 1)
        # nested defaults apply inside defaults
        self.assertEqual(out["spec"]["nested"], {"level": "info", "inner": {"n": 7}})
        out = apply_defaults(_obj(replicas=4, nested={"level": "debug"}), CRONTAB)
        self.assertEqual(out["spec"]["replicas"], 4)
        self.assertEqual(out["spec"]["nested"], {"level": "debug", "inner": {"n": 7}})

    def test_nullable(self):
        # null on a non-nullable field with a default: defaulted
        out = apply_defaults(_obj(replicas=None), CRONTAB)
        self.assertEqual(out["spec"]["replicas"], 1)
        # null on a non-nullable field without default: dropped
        out = apply_defaults(_obj(image=None), CRONTAB)
        self.assertNotIn("image", out["spec"])
        # null on a nullable field: kept
        out = apply_defaults(_obj(opt=None), CRONTAB)
        self.assertIn("opt", out["spec"])
        self.assertIsNone(out["spec"]["opt"])

    def test_items_and_additional_properties(self):
        s = {"type": "object", "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {
                "w": {"type": "integer", "default": 1}}}},
            "map": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {"v": {"type": "string", "default": "d"}}}},
        }}
        out = apply_defaults({"list": [{}, {"w": 5}], "map": {"a": {}, "b": {"v": "x"}}}, s)
        self.assertEqual(out, {"list": [{"w": 1}, {"w": 5}],
                               "map": {"a": {"v": "d"}, "b": {"v": "x"}}})

    def test_status_level_default(self):
        # the InferenceModel pattern: a default at the status level
        s = {"type": "object", "properties": {"status": {
            "type": "object",
            "default": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
            "properties": {"conditions": {"type": "array", "items": {
                "type": "object", "properties": {"type": {"type": "string"},
                                                 "status": {"type": "string"}}}}}}}}
        out = apply_defaults({"spec": {}}, s)
        self.assertEqual(out["status"], {"conditions": [{"type": "Ready", "status": "Unknown"}]})


class ValidateTest(unittest.TestCase):
    def check(self, obj, want):
        got = [c.error() for c in validate(obj, CRONTAB)]
        self.assertEqual(got, want)

    def test_valid(self):
        self.check(_obj(image="nginx", replicas=3, mode="Fast", ratio=0.5, port=8080, step=15,
                        target="50%", tags=["a", "b"], ports=[{"name": "a"}, {"name": "b"}],
                        labels={"a": "b"}, opt=None, free={"x": [1]}), [])
        self.check(_obj(target=8080, replicas=3.0), [])

    CASES = [
        (dict(replicas=15),
         ["spec.replicas: Invalid value: 15: spec.replicas in body should be less than or equal "
          "to 10"]),
        (dict(replicas=0),
         ["spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or "
          "equal to 1"]),
        (dict(replicas="3"),
         ['spec.replicas: Invalid value: "string": spec.replicas in body must be of type '
          'integer: "string"']),
        (dict(replicas=1.5),
         ['spec.replicas: Invalid value: "number": spec.replicas in body must be of type '
          'integer: "number"']),
        (dict(replicas=True),
         ['spec.replicas: Invalid value: "boolean": spec.replicas in body must be of type '
          'integer: "boolean"']),
        (dict(image=None),
         ['spec.image: Invalid value: "null": spec.image in body must be of type string: '
          '"null"']),
        (dict(image="much-too-long-image"),
         ["spec.image: Too long: may not be more than 10 bytes"]),
        (dict(image="x"),
         ['spec.image: Invalid value: "x": spec.image in body should be at least 2 chars long']),
        (dict(mode="Medium"),
         ['spec.mode: Unsupported value: "Medium": supported values: "Fast", "Slow"']),
        (dict(ratio=1), ["spec.ratio: Invalid value: 1: spec.ratio in body should be less than "
                         "1"]),
        (dict(ratio=0), ["spec.ratio: Invalid value: 0: spec.ratio in body should be greater "
                         "than 0"]),
        (dict(port=2**31), ['spec.port: Invalid value: 2147483648: spec.port in body must be of '
                            'type int32: "2147483648"']),
        (dict(step=7), ["spec.step: Invalid value: 7: spec.step in body should be a multiple of "
                        "5"]),
        (dict(target=1.5), ['spec.target: Invalid value: "number": spec.target in body must be '
                            'of type integer,string: "number"']),
        (dict(tags=["a", "b", "a", "c"]),
         ["spec.tags: Too many: 4: must have at most 3 items",
          'spec.tags[2]: Duplicate value: "a"']),
        (dict(tags=[]), ["spec.tags: Invalid value: 0: spec.tags in body should have at least 1 "
                         "items"]),
        (dict(tags=[1]), ['spec.tags[0]: Invalid value: "integer": spec.tags[0] in body must be '
                          'of type string: "integer"']),
        (dict(ports=[{"name": "a"}, {"name": "a", "port": 2}, {"port": 3}]),
         ["spec.ports[2].name: Required value",
          'spec.ports[1]: Duplicate value: map[string]interface {}{"name":"a"}']),
        (dict(labels={"a": "1", "b": "2", "c": 3}),
         ["spec.labels: Too many: 3: must have at most 2 items",
          'spec.labels.c: Invalid value: "integer": spec.labels.c in body must be of type '
          'string: "integer"']),
        (dict(cronSpec="bad"),
         ['spec.cronSpec: Invalid value: "bad": spec.cronSpec in body should match '
          "'^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$'"]),
        (dict(template={"spec": {}}),
         ["spec.template.apiVersion: Required value: must not be empty",
          "spec.template.kind: Required value: must not be empty"]),
    ]

    def test_cases(self):
        for spec, want in self.CASES:
            with self.subTest(spec=spec):
                self.check(_obj(**spec), want)

    def test_required_and_root(self):
        o = _obj()
        del o["spec"]["cronSpec"]
        causes = validate(o, CRONTAB)
        self.assertEqual(causes, [Cause("FieldValueRequired", "spec.cronSpec", "Required value")])
        self.assertEqual(causes[0].to_dict(), {"reason": "FieldValueRequired",
                                               "message": "Required value",
                                               "field": "spec.cronSpec"})
        self.assertEqual([c.error() for c in validate({"spec": "x"}, CRONTAB)],
                         ['spec: Invalid value: "string": spec in body must be of type object: '
                          '"string"'])

    def test_reasons(self):
        reasons = {c.reason for c in validate(_obj(replicas=15, mode="x", image="y" * 20,
                                                   tags=["a", "a"], replicas2=1), CRONTAB)}
        self.assertEqual(reasons, {"FieldValueInvalid", "FieldValueNotSupported",
                                   "FieldValueTooLong", "FieldValueDuplicate"})

    def test_junctors(self):
        s = {"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
        }}}
        self.assertEqual(validate({"spec": {"a": "x"}}, s), [])
        errs = [c.error() for c in validate({"spec": {"a": "x", "b": "y"}}, s)]
        self.assertEqual(errs, ['spec: Invalid value: "": spec in body must validate one and '
                                'only one schema (oneOf)'])
        s2 = {"type": "object", "properties": {"n": {"type": "integer",
                                                     "anyOf": [{"minimum": 10},
                                                               {"maximum": 0}],
                                                     "not": {"enum": [5]}}}}
        self.assertEqual(validate({"n": 12}, s2), [])
        self.assertEqual([c.error() for c in validate({"n": 5}, s2)],
                         ["n: Invalid value: 5: n in body must validate at least one schema "
                          "(anyOf)", "n: Invalid value: 5: n in body must not validate the "
                                     "schema (not)"])
        s3 = {"type": "object", "properties": {"n": {"type": "string",
                                                     "allOf": [{"maxLength": 2}]}}}
        self.assertEqual([c.error() for c in validate({"n": "abc"}, s3)],
                         ["n: Too long: may not be more than 2 bytes"])

    def test_formats(self):
        s = {"type": "object", "properties": {
            "t": {"type": "string", "format": "date-time"},
            "u": {"type": "string", "format": "uuid"},
            "b": {"type": "string", "format": "byte"},
            "i": {"type": "string", "format": "ipv4"},
            "o": {"type": "string", "format": "something-unknown"},
        }}
        self.assertEqual(validate({"t": "2024-01-02T03:04:05Z",
                                   "u": "123e4567-e89b-12d3-a456-426614174000",
                                   "b": "aGVsbG8=", "i": "10.0.0.1", "o": "x"}, s), [])
        bad = validate({"t": "yesterday", "u": "x", "b": "***", "i": "300.1.1.1"}, s)
        self.assertEqual(sorted(c.field for c in bad), ["b", "i", "t", "u"])
        by_field = {c.field: c.message for c in bad}
        self.assertEqual(by_field["t"], 'Invalid value: "yesterday": t in body must be of type '
                                        'date-time: "yesterday"')


class FormatMessageTest(unittest.TestCase):
    def test_one_and_many(self):
        c1 = Cause("FieldValueInvalid", "spec.replicas",
                   "Invalid value: 15: spec.replicas in body should be less than or equal to 10")
        c2 = Cause("FieldValueRequired", "spec.cronSpec", "Required value")
        self.assertEqual(
            format_invalid_message("CronTab", "stable.example.com", "my-new-cron-object", [c1]),
            'CronTab.stable.example.com "my-new-cron-object" is invalid: spec.replicas: Invalid '
            "value: 15: spec.replicas in body should be less than or equal to 10")
        self.assertEqual(
            format_invalid_message("CronTab", "stable.example.com", "x", [c1, c2]),
            'CronTab.stable.example.com "x" is invalid: [spec.replicas: Invalid value: 15: '
            "spec.replicas in body should be less than or equal to 10, spec.cronSpec: Required "
            "value]")
        self.assertEqual(format_invalid_message("Pod", "", "p", [c2]),
                         'Pod "p" is invalid: spec.cronSpec: Required value')
        self.assertEqual(format_invalid_message("Pod", "", "p", []), 'Pod "p" is invalid')
        # duplicates fold, dict causes work too
        self.assertEqual(
            format_invalid_message("Pod", "", "p", [c2, c2.to_dict()]),
            'Pod "p" is invalid: spec.cronSpec: Required value')

    def test_go_formatting(self):
        self.assertEqual(go_quote('a"b\\c\n'), '"a\\"b\\\\c\\n"')
        self.assertEqual(go_value(None), '"null"')
        self.assertEqual(go_value(1.5), "1.5")
        self.assertEqual(go_value(1e21), "1e+21")
        self.assertEqual(go_value(True), "true")
        self.assertEqual(go_value({"a": 1}), 'map[string]interface {}{"a":1}')


if __name__ == "__main__":
    unittest.main()
