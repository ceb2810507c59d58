#!/usr/bin/env bash
# Regenerate pool/_transport/_proto/leakypool_pb2.py(i) from leakypool.proto.
#
# The stubs are committed so that a plain `pip install` needs no compiler.
# They are generated with grpcio-tools 1.76 (protoc 31.1, protobuf gencode
# 6.31.1), the oldest runtime leakypool supports, so the same stubs load
# under protobuf 6.31+ and 7.x (wool, an optional extra, pins protobuf<7).
set -euo pipefail
cd "$(dirname "$0")/../pool/_transport/_proto"
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q "grpcio-tools==1.76.0"
"$venv/bin/python" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. leakypool.proto
# protoc's --pyi_out types the dict a message field also accepts as a bare `_Mapping`, which a type checker
# reads as Mapping[Unknown, Unknown] (pyright --verifytypes counts that against the public API: Task.fill
# takes a pb.Call). Name it: field names to values of any field type.
"$venv/bin/python" - <<'FIXUP'
import pathlib

stub = pathlib.Path("leakypool_pb2.pyi")
text = stub.read_text().replace("_Mapping]", "_Mapping[str, object]]")
if "_Mapping]" in text or "_Mapping[str, object]" not in text:
    raise SystemExit("leakypool_pb2.pyi: protoc's output changed shape; revisit the _Mapping fix-up")
stub.write_text(text)
FIXUP
echo "regenerated $(pwd)/leakypool_pb2.py"
