#!/usr/bin/env bash
# Build gRPC (with protobuf, abseil, re2, c-ares) and the FaceBridge core library with Unreal Engine's own Linux
# toolchain (its clang and bundled libc++; OpenSSL and zlib from the engine), into
#   Source/ThirdParty/FaceBridgeGrpc/lib/Linux/*.a   and   Source/ThirdParty/FaceBridgeGrpc/include/facebridge/
# which FaceBridgeGrpc.Build.cs links. Run once per engine version (and again after changing proto/ or core/).
#
#   unreal_plugin/Scripts/build_thirdparty_linux.sh /path/to/UnrealEngine [grpc tag, default v1.51.1]
#
# Needs: git, cmake >= 3.18, ninja or make, a host C++ compiler (for protoc/grpc_cpp_plugin), network access to
# github.com for the gRPC sources, ~4 GB disk and some time (gRPC is large). Why not Debian's libgrpc++: the
# engine links its own libc++, and C++ libraries built against libstdc++ cannot be mixed with it.
set -euo pipefail

if [[ $# -lt 1 || ! -d "$1/Engine" ]]; then
  echo "usage: $0 /path/to/UnrealEngine [grpc-tag]  (the folder that contains Engine/)" >&2
  exit 2
fi
UE_ROOT=$(cd "$1" && pwd)
GRPC_TAG=${2:-v1.51.1}
PLUGIN=$(cd "$(dirname "$0")/.." && pwd)
REPO=$(cd "$PLUGIN/.." && pwd)
OUT=$PLUGIN/Source/ThirdParty/FaceBridgeGrpc
WORK=${WORK:-$PLUGIN/Intermediate/ThirdPartyBuild}
JOBS=${JOBS:-$(nproc)}
TRIPLE=x86_64-unknown-linux-gnu
mkdir -p "$WORK"

die() { echo "build_thirdparty_linux: $*" >&2; exit 1; }
newest() { ls -d "$@" 2>/dev/null | sort -V | tail -1; }

# --- the engine's toolchain and libraries -------------------------------------------------------------------
SDK=$(newest "$UE_ROOT"/Engine/Extras/ThirdPartyNotUE/SDKs/HostLinux/Linux_x64/*/$TRIPLE)
[[ -x "$SDK/bin/clang++" ]] || die "no clang in $UE_ROOT/Engine/Extras/ThirdPartyNotUE/SDKs/HostLinux (run the engine's Setup.sh first)"
LIBCXX=$UE_ROOT/Engine/Source/ThirdParty/Unix/LibCxx
[[ -d "$LIBCXX/include/c++/v1" ]] || die "no bundled libc++ headers in $LIBCXX"
LIBCXX_LIB=$LIBCXX/lib/Unix/$TRIPLE
SSL_LIB=$(dirname "$(newest "$UE_ROOT"/Engine/Source/ThirdParty/OpenSSL/*/lib/Unix/$TRIPLE/libssl.a)")
SSL_INC=$(dirname "$(dirname "$(newest "$UE_ROOT"/Engine/Source/ThirdParty/OpenSSL/*/include/Unix/$TRIPLE/openssl/ssl.h)")")
ZLIB_A=$(newest "$UE_ROOT"/Engine/Source/ThirdParty/zlib/*/lib/Unix/$TRIPLE/Release/libz.a "$UE_ROOT"/Engine/Source/ThirdParty/zlib/*/lib/Unix/$TRIPLE/libz.a)
ZLIB_INC=$(dirname "$(newest "$UE_ROOT"/Engine/Source/ThirdParty/zlib/*/include/Unix/$TRIPLE/zlib.h "$UE_ROOT"/Engine/Source/ThirdParty/zlib/*/include/zlib.h)")
[[ -f "$SSL_LIB/libssl.a" && -d "$SSL_INC" && -f "$ZLIB_A" && -d "$ZLIB_INC" ]] || die "engine OpenSSL/zlib not found under Engine/Source/ThirdParty"
echo "engine toolchain: $SDK"
echo "libc++: $LIBCXX   OpenSSL: $SSL_LIB   zlib: $ZLIB_A"

cat > "$WORK/ue-linux.toolchain.cmake" <<CMAKE
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_SYSROOT "$SDK")
set(CMAKE_C_COMPILER "$SDK/bin/clang")
set(CMAKE_CXX_COMPILER "$SDK/bin/clang++")
set(CMAKE_C_COMPILER_TARGET $TRIPLE)
set(CMAKE_CXX_COMPILER_TARGET $TRIPLE)
# Unreal compiles against its bundled libc++; so must everything linked into a module.
set(CMAKE_CXX_FLAGS_INIT "-nostdinc++ -isystem $LIBCXX/include/c++/v1 -fPIC")
set(CMAKE_C_FLAGS_INIT "-fPIC")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-nostdlib++ -L$LIBCXX_LIB -lc++ -lc++abi -lpthread -ldl")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
CMAKE

# --- gRPC sources ----------------------------------------------------------------------------------------------
if [[ ! -d "$WORK/grpc/.git" ]]; then
  git clone --depth 1 --branch "$GRPC_TAG" --recurse-submodules --shallow-submodules https://github.com/grpc/grpc "$WORK/grpc"
fi

# --- 1. host code generators (protoc, grpc_cpp_plugin) of the same version --------------------------------------
cmake -S "$WORK/grpc" -B "$WORK/host" -DCMAKE_BUILD_TYPE=Release -DgRPC_INSTALL=ON -DgRPC_BUILD_TESTS=OFF \
  -DgRPC_BUILD_CODEGEN=ON -DgRPC_BUILD_GRPC_CSHARP_PLUGIN=OFF -DgRPC_BUILD_GRPC_NODE_PLUGIN=OFF \
  -DgRPC_BUILD_GRPC_OBJECTIVE_C_PLUGIN=OFF -DgRPC_BUILD_GRPC_PHP_PLUGIN=OFF -DgRPC_BUILD_GRPC_PYTHON_PLUGIN=OFF \
  -DgRPC_BUILD_GRPC_RUBY_PLUGIN=OFF -DCMAKE_INSTALL_PREFIX="$WORK/host-install"
cmake --build "$WORK/host" --target protoc grpc_cpp_plugin -j "$JOBS"
HOST_PROTOC=$(find "$WORK/host" -name protoc -type f -perm -u+x | head -1)
HOST_PLUGIN=$(find "$WORK/host" -name grpc_cpp_plugin -type f -perm -u+x | head -1)

# --- 2. gRPC libraries with the engine's toolchain -------------------------------------------------------------
cmake -S "$WORK/grpc" -B "$WORK/ue" -DCMAKE_TOOLCHAIN_FILE="$WORK/ue-linux.toolchain.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$WORK/ue-install" -DBUILD_SHARED_LIBS=OFF \
  -DgRPC_INSTALL=ON -DgRPC_BUILD_TESTS=OFF -DgRPC_BUILD_CODEGEN=OFF -Dprotobuf_BUILD_PROTOC_BINARIES=OFF \
  -DgRPC_SSL_PROVIDER=package -DOPENSSL_ROOT_DIR="$SSL_LIB" -DOPENSSL_INCLUDE_DIR="$SSL_INC" \
  -DOPENSSL_SSL_LIBRARY="$SSL_LIB/libssl.a" -DOPENSSL_CRYPTO_LIBRARY="$SSL_LIB/libcrypto.a" \
  -DgRPC_ZLIB_PROVIDER=package -DZLIB_INCLUDE_DIR="$ZLIB_INC" -DZLIB_LIBRARY="$ZLIB_A"
cmake --build "$WORK/ue" -j "$JOBS"
cmake --install "$WORK/ue"

# --- 3. the FaceBridge core (no tests) against those libraries -------------------------------------------------
cmake -S "$PLUGIN/core" -B "$WORK/core" -DCMAKE_TOOLCHAIN_FILE="$WORK/ue-linux.toolchain.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$WORK/ue-install" -DCMAKE_INSTALL_PREFIX="$WORK/core-install" \
  -DFACEBRIDGE_BUILD_TESTS=OFF -DFACEBRIDGE_PROTOC="$HOST_PROTOC" -DGRPC_CPP_PLUGIN="$HOST_PLUGIN" \
  -DOPENSSL_ROOT_DIR="$SSL_LIB" -DOPENSSL_INCLUDE_DIR="$SSL_INC" -DZLIB_INCLUDE_DIR="$ZLIB_INC" -DZLIB_LIBRARY="$ZLIB_A"
cmake --build "$WORK/core" -j "$JOBS"
cmake --install "$WORK/core"

# --- 4. hand the results to the ThirdParty module ---------------------------------------------------------------
rm -rf "$OUT/lib/Linux" "$OUT/include"
mkdir -p "$OUT/lib/Linux" "$OUT/include"
cp "$WORK/core-install/lib/libfacebridge_core.a" "$OUT/lib/Linux/"
# Everything gRPC installed except the engine's own OpenSSL/zlib (linked via AddEngineThirdPartyPrivateStaticDependencies).
find "$WORK/ue-install/lib" -name '*.a' ! -name 'libssl.a' ! -name 'libcrypto.a' ! -name 'libz.a' -exec cp {} "$OUT/lib/Linux/" \;
cp -r "$WORK/core-install/include/facebridge" "$OUT/include/"
echo "done: $(ls "$OUT/lib/Linux" | wc -l) libraries in $OUT/lib/Linux (proto: $REPO/proto/facebridge/v1/facebridge.proto)"
