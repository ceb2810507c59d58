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
echo "regenerated $(pwd)/leakypool_pb2.py"
