// Per-source settings shown in the Live Link panel's details view; changing them reconnects the source.
#pragma once

#include "CoreMinimal.h"
#include "LiveLinkSourceSettings.h"

#include "FaceBridgeLiveLinkSourceSettings.generated.h"

UCLASS()
class FACEBRIDGELIVELINK_API UFaceBridgeLiveLinkSourceSettings : public ULiveLinkSourceSettings
{
	GENERATED_BODY()

public:
	/** The bridge's gRPC address (facebridge run --grpc HOST:PORT). */
	UPROPERTY(EditAnywhere, Category = "FaceBridge")
	FString Address = TEXT("127.0.0.1:50051");

	/** Bearer token, when the bridge runs with --grpc-token. Stored with the source preset. */
	UPROPERTY(EditAnywhere, Category = "FaceBridge", meta = (PasswordField = true))
	FString Token;

	/** Subjects to receive; empty receives all the bridge tracks. */
	UPROPERTY(EditAnywhere, Category = "FaceBridge")
	TArray<FString> Subjects;

	/** Upper bound on frames per second per subject; 0 takes every frame. */
	UPROPERTY(EditAnywhere, Category = "FaceBridge", meta = (ClampMin = "0", ClampMax = "1000"))
	float MaxFrameRate = 0.0f;

	/** Also publish "<Subject>Head" with the Animation role (root, head, eye_left, eye_right bones). */
	UPROPERTY(EditAnywhere, Category = "FaceBridge")
	bool bPushHeadBones = true;
};
