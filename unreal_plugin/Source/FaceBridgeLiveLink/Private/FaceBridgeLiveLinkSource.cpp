#include "FaceBridgeLiveLinkSource.h"

#include "FaceBridgeLiveLinkSourceSettings.h"
#include "ILiveLinkClient.h"
#include "LiveLinkTypes.h"
#include "Misc/QualifiedFrameTime.h"
#include "Roles/LiveLinkAnimationRole.h"
#include "Roles/LiveLinkAnimationTypes.h"
#include "Roles/LiveLinkBasicRole.h"

#include "facebridge/livelink_mapping.h"

#define LOCTEXT_NAMESPACE "FaceBridgeLiveLinkSource"

namespace
{
FName ToName(const std::string& Text) { return FName(UTF8_TO_TCHAR(Text.c_str())); }

FName HeadSubject(const FName& Subject) { return FName(*(Subject.ToString() + TEXT("Head"))); }

TArray<FName> ToNames(const std::vector<std::string>& Names)
{
	TArray<FName> Out;
	Out.Reserve(Names.size());
	for (const std::string& Name : Names)
	{
		Out.Add(ToName(Name));
	}
	return Out;
}
}  // namespace

FFaceBridgeLiveLinkSource::FFaceBridgeLiveLinkSource(const facebridge::ClientSettings& InSettings,
                                                     bool bInPushHeadBones)
	: Settings(InSettings), bPushHeadBones(bInPushHeadBones)
{
}

FFaceBridgeLiveLinkSource::~FFaceBridgeLiveLinkSource() { StopClient(); }

void FFaceBridgeLiveLinkSource::ReceiveClient(ILiveLinkClient* InClient, FGuid InSourceGuid)
{
	Client = InClient;
	SourceGuid = InSourceGuid;
	StartClient();
}

void FFaceBridgeLiveLinkSource::InitializeSettings(ULiveLinkSourceSettings* InSettings)
{
	// A source made from the panel or a connection string fills the details view from what it runs with.
	if (UFaceBridgeLiveLinkSourceSettings* Typed = Cast<UFaceBridgeLiveLinkSourceSettings>(InSettings))
	{
		Typed->Address = UTF8_TO_TCHAR(Settings.address.c_str());
		Typed->Token = UTF8_TO_TCHAR(Settings.token.c_str());
		Typed->Subjects.Reset();
		for (const std::string& Subject : Settings.subjects)
		{
			Typed->Subjects.Add(UTF8_TO_TCHAR(Subject.c_str()));
		}
		Typed->MaxFrameRate = static_cast<float>(Settings.max_frame_rate);
		Typed->bPushHeadBones = bPushHeadBones;
	}
}

void FFaceBridgeLiveLinkSource::OnSettingsChanged(ULiveLinkSourceSettings* InSettings,
                                                  const FPropertyChangedEvent& PropertyChangedEvent)
{
	ILiveLinkSource::OnSettingsChanged(InSettings, PropertyChangedEvent);
	const UFaceBridgeLiveLinkSourceSettings* Typed = Cast<UFaceBridgeLiveLinkSourceSettings>(InSettings);
	if (Typed == nullptr)
	{
		return;
	}
	facebridge::ClientSettings Changed = Settings;
	Changed.address = TCHAR_TO_UTF8(*Typed->Address);
	Changed.token = TCHAR_TO_UTF8(*Typed->Token);
	Changed.subjects.clear();
	for (const FString& Subject : Typed->Subjects)
	{
		Changed.subjects.push_back(TCHAR_TO_UTF8(*Subject));
	}
	Changed.max_frame_rate = Typed->MaxFrameRate;
	const bool bReconnect = Changed.address != Settings.address || Changed.token != Settings.token ||
	                        Changed.subjects != Settings.subjects || Changed.max_frame_rate != Settings.max_frame_rate ||
	                        Typed->bPushHeadBones != bPushHeadBones;
	if (bReconnect && Client != nullptr)
	{
		StopClient();
		Settings = Changed;
		bPushHeadBones = Typed->bPushHeadBones;
		StartClient();
	}
}

void FFaceBridgeLiveLinkSource::StartClient()
{
	PushedNames.Reset();
	StreamClient = MakeUnique<facebridge::StreamClient>(Settings);
	StreamClient->OnLayout([this](const facebridge::SubjectLayout& Layout) { HandleLayout(Layout); });
	StreamClient->OnFrame([this](const facebridge::SubjectLayout& Layout, const facebridge::FaceSample& Sample) {
		HandleFrame(Layout, Sample);
	});
	StreamClient->Start();
}

void FFaceBridgeLiveLinkSource::StopClient()
{
	if (StreamClient.IsValid())
	{
		StreamClient->Stop();  // cancels the stream and joins its thread: no callback runs after this
		StreamClient.Reset();
	}
}

void FFaceBridgeLiveLinkSource::HandleLayout(const facebridge::SubjectLayout& Layout)
{
	if (Client == nullptr || bShuttingDown)
	{
		return;
	}
	const FName Subject = ToName(Layout.subject);
	TArray<FName> Names = ToNames(facebridge::PropertyNames(Layout));
	if (const TArray<FName>* Pushed = PushedNames.Find(Subject); Pushed != nullptr && *Pushed == Names)
	{
		return;  // the header came again for a model change only; keep the buffered frames
	}

	FLiveLinkStaticDataStruct CurveData(FLiveLinkBaseStaticData::StaticStruct());
	CurveData.Cast<FLiveLinkBaseStaticData>()->PropertyNames = Names;
	Client->PushSubjectStaticData_AnyThread({SourceGuid, Subject}, ULiveLinkBasicRole::StaticClass(),
	                                        MoveTemp(CurveData));

	if (bPushHeadBones)
	{
		FLiveLinkStaticDataStruct SkeletonData(FLiveLinkSkeletonStaticData::StaticStruct());
		FLiveLinkSkeletonStaticData* Skeleton = SkeletonData.Cast<FLiveLinkSkeletonStaticData>();
		Skeleton->SetBoneNames(ToNames(facebridge::BoneNames()));
		TArray<int32> Parents;
		for (int Parent : facebridge::BoneParents())
		{
			Parents.Add(Parent);
		}
		Skeleton->SetBoneParents(Parents);
		Client->PushSubjectStaticData_AnyThread({SourceGuid, HeadSubject(Subject)},
		                                        ULiveLinkAnimationRole::StaticClass(), MoveTemp(SkeletonData));
	}
	PushedNames.Add(Subject, MoveTemp(Names));
}

void FFaceBridgeLiveLinkSource::HandleFrame(const facebridge::SubjectLayout& Layout,
                                            const facebridge::FaceSample& Sample)
{
	if (Client == nullptr || bShuttingDown)
	{
		return;
	}
	const FName Subject = ToName(Sample.subject);
	// WorldTime: the bridge's monotonic capture clock; FLiveLinkWorldTime derives the offset to engine time.
	const FLiveLinkWorldTime WorldTime(Sample.source_time);
	const FQualifiedFrameTime SceneTime(
		FFrameTime(FFrameNumber(Sample.timecode.frame), Sample.timecode.subframe),
		FFrameRate(Sample.timecode.rate_numerator, Sample.timecode.rate_denominator));

	FLiveLinkFrameDataStruct CurveFrame(FLiveLinkBaseFrameData::StaticStruct());
	FLiveLinkBaseFrameData* Curves = CurveFrame.Cast<FLiveLinkBaseFrameData>();
	Curves->WorldTime = WorldTime;
	Curves->MetaData.SceneTime = SceneTime;
	Curves->MetaData.StringMetaData.Add(TEXT("FaceFound"), Sample.face_found ? TEXT("true") : TEXT("false"));
	Curves->MetaData.StringMetaData.Add(TEXT("Seq"), FString::Printf(TEXT("%llu"), static_cast<unsigned long long>(Sample.seq)));
	Curves->MetaData.StringMetaData.Add(TEXT("DroppedFrames"), FString::Printf(TEXT("%llu"), static_cast<unsigned long long>(Sample.dropped_frames)));
	const std::vector<float> Values = facebridge::PropertyValues(Layout, Sample);
	Curves->PropertyValues.Append(Values.data(), static_cast<int32>(Values.size()));
	Client->PushSubjectFrameData_AnyThread({SourceGuid, Subject}, MoveTemp(CurveFrame));

	if (bPushHeadBones)
	{
		FLiveLinkFrameDataStruct BoneFrame(FLiveLinkAnimationFrameData::StaticStruct());
		FLiveLinkAnimationFrameData* Bones = BoneFrame.Cast<FLiveLinkAnimationFrameData>();
		Bones->WorldTime = WorldTime;
		Bones->MetaData.SceneTime = SceneTime;
		for (const facebridge::Quat& Q : facebridge::BoneRotations(Sample))
		{
			Bones->Transforms.Add(FTransform(FQuat(Q.x, Q.y, Q.z, Q.w)));
		}
		Client->PushSubjectFrameData_AnyThread({SourceGuid, HeadSubject(Subject)}, MoveTemp(BoneFrame));
	}
}

bool FFaceBridgeLiveLinkSource::IsSourceStillValid() const
{
	// The stream client reconnects on its own; the source stays valid (its status says what is happening).
	return StreamClient.IsValid() && !bShuttingDown;
}

bool FFaceBridgeLiveLinkSource::RequestSourceShutdown()
{
	bShuttingDown = true;
	StopClient();
	return true;
}

FText FFaceBridgeLiveLinkSource::GetSourceType() const { return LOCTEXT("SourceType", "FaceBridge"); }

FText FFaceBridgeLiveLinkSource::GetSourceMachineName() const
{
	return FText::FromString(UTF8_TO_TCHAR(Settings.address.c_str()));
}

FText FFaceBridgeLiveLinkSource::GetSourceStatus() const
{
	if (!StreamClient.IsValid())
	{
		return LOCTEXT("Stopped", "Stopped");
	}
	return FText::FromString(UTF8_TO_TCHAR(StreamClient->StatusText().c_str()));
}

TSubclassOf<ULiveLinkSourceSettings> FFaceBridgeLiveLinkSource::GetSettingsClass() const
{
	return UFaceBridgeLiveLinkSourceSettings::StaticClass();
}

#undef LOCTEXT_NAMESPACE
