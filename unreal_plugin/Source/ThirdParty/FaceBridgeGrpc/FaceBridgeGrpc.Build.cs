// External module: gRPC, protobuf, abseil and the FaceBridge core (libfacebridge_core) built with this engine's
// toolchain by unreal_plugin/Scripts/build_thirdparty_linux.sh into lib/<Platform>/ and include/.
// OpenSSL and zlib come from the engine so that only one copy of each is linked (as TurboLink does).
using System;
using System.IO;
using System.Linq;
using UnrealBuildTool;

public class FaceBridgeGrpc : ModuleRules
{
	public FaceBridgeGrpc(ReadOnlyTargetRules Target) : base(Target)
	{
		Type = ModuleType.External;

		string Platform = Target.Platform.ToString();
		string IncludeDir = Path.Combine(ModuleDirectory, "include");
		string LibDir = Path.Combine(ModuleDirectory, "lib", Platform);
		if (!Directory.Exists(LibDir) || !File.Exists(Path.Combine(IncludeDir, "facebridge", "stream_client.h")))
		{
			throw new BuildException(
				"FaceBridgeGrpc libraries for " + Platform + " are missing in " + LibDir + ". " +
				"Build them once with unreal_plugin/Scripts/build_thirdparty_linux.sh <UE root> " +
				"(Windows: see unreal_plugin/README.md).");
		}

		PublicSystemIncludePaths.Add(IncludeDir);

		// Static libraries: the core first, then gRPC and its dependencies (link order matters on Linux).
		string Suffix = Target.Platform == UnrealTargetPlatform.Win64 ? ".lib" : ".a";
		var Libraries = Directory.GetFiles(LibDir, "*" + Suffix)
			.OrderBy(Path => Path.Contains("facebridge_core") ? 0 : Path.Contains("grpc") ? 1 : 2)
			.ToList();
		foreach (string Library in Libraries)
		{
			PublicAdditionalLibraries.Add(Library);
		}

		AddEngineThirdPartyPrivateStaticDependencies(Target, "OpenSSL", "zlib");
		if (Target.Platform == UnrealTargetPlatform.Win64)
		{
			PublicSystemLibraries.AddRange(new string[] { "ws2_32.lib", "crypt32.lib", "iphlpapi.lib" });
		}
		PublicDefinitions.Add("FACEBRIDGE_WITH_GRPC=1");
	}
}
