// ILiveLinkSource for the FaceBridge gRPC stream. Per bridge subject it publishes
//   "<Subject>"      Basic role: ARKit-52 curves, "Emotion.<name>", HeadYaw/HeadPitch/HeadRoll, eye angles,
//                    Confidence (facebridge::PropertyNames), so Live Link Face-style Anim Blueprints work;
//   "<Subject>Head"  Animation role: bones root > head > eye_left, eye_right with the head and gaze rotations.
// Frames carry WorldTime (the bridge's monotonic capture clock) and SceneTime (capture timecode), so both
// EngineTime and Timecode evaluation modes work. Networking, decoding and reconnect-with-backoff live in the
// plain C++ core (facebridge::StreamClient), which calls back on its own thread; the _AnyThread push calls are
// made from there.
#pragma once

#include <atomic>

#include "CoreMinimal.h"
#include "ILiveLinkSource.h"
#include "Templates/UniquePtr.h"

#include "facebridge/stream_client.h"

class ILiveLinkClient;
class ULiveLinkSourceSettings;

class FACEBRIDGELIVELINK_API FFaceBridgeLiveLinkSource : public ILiveLinkSource,
                                                         public TSharedFromThis<FFaceBridgeLiveLinkSource>
{
public:
	explicit FFaceBridgeLiveLinkSource(const facebridge::ClientSettings& InSettings, bool bInPushHeadBones = true);
	virtual ~FFaceBridgeLiveLinkSource();

	// ILiveLinkSource
	virtual void ReceiveClient(ILiveLinkClient* InClient, FGuid InSourceGuid) override;
	virtual void InitializeSettings(ULiveLinkSourceSettings* InSettings) override;
	virtual void Update() override {}
	virtual bool IsSourceStillValid() const override;
	virtual bool RequestSourceShutdown() override;
	virtual FText GetSourceType() const override;
	virtual FText GetSourceMachineName() const override;
	virtual FText GetSourceStatus() const override;
	virtual TSubclassOf<ULiveLinkSourceSettings> GetSettingsClass() const override;
	virtual void OnSettingsChanged(ULiveLinkSourceSettings* InSettings,
	                               const FPropertyChangedEvent& PropertyChangedEvent) override;

	const facebridge::ClientSettings& GetClientSettings() const { return Settings; }

private:
	void StartClient();
	void StopClient();
	// Called on the stream client's thread.
	void HandleLayout(const facebridge::SubjectLayout& Layout);
	void HandleFrame(const facebridge::SubjectLayout& Layout, const facebridge::FaceSample& Sample);

	ILiveLinkClient* Client = nullptr;
	FGuid SourceGuid;
	facebridge::ClientSettings Settings;
	bool bPushHeadBones = true;
	TUniquePtr<facebridge::StreamClient> StreamClient;
	// Property names last pushed per subject (stream thread only): static data is pushed again only when
	// they change, because pushing it flushes the subject's buffered frames.
	TMap<FName, TArray<FName>> PushedNames;
	std::atomic<bool> bShuttingDown{false};
};
