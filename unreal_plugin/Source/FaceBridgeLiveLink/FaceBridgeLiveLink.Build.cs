// FaceBridge Live Link source. The network and decoding work is the plain C++17 core in ../../core (tested with
// CMake + GoogleTest outside the engine); it is built together with gRPC for this engine's toolchain by
// ../../Scripts/build_thirdparty_linux.sh (see ../../README.md) and comes in through the FaceBridgeGrpc module.
// This module only adapts the core's plain structs to Live Link and never includes gRPC or protobuf headers.
using UnrealBuildTool;

public class FaceBridgeLiveLink : ModuleRules
{
	public FaceBridgeLiveLink(ReadOnlyTargetRules Target) : base(Target)
	{
		PCHUsageMode = PCHUsageMode.UseExplicitOrSharedPCHs;

		PublicDependencyModuleNames.AddRange(new string[]
		{
			"Core",
			"CoreUObject",
			"Engine",
			"LiveLinkInterface",
		});

		PrivateDependencyModuleNames.AddRange(new string[]
		{
			"Slate",
			"SlateCore",
			"InputCore",
			"FaceBridgeGrpc",
		});
	}
}
