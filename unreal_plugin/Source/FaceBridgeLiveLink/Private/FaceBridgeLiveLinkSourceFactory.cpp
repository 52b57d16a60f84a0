#include "FaceBridgeLiveLinkSourceFactory.h"

#include "FaceBridgeLiveLinkSource.h"
#include "Widgets/Input/SButton.h"
#include "Widgets/Input/SEditableTextBox.h"
#include "Widgets/Layout/SBox.h"
#include "Widgets/SBoxPanel.h"
#include "Widgets/Text/STextBlock.h"

#include "facebridge/connection.h"

#define LOCTEXT_NAMESPACE "FaceBridgeLiveLinkSourceFactory"

namespace
{
/** The Add Source sub-panel: address, token, subjects, and a button that creates the source. */
class SFaceBridgeSourcePanel : public SCompoundWidget
{
public:
	SLATE_BEGIN_ARGS(SFaceBridgeSourcePanel) {}
		SLATE_EVENT(ULiveLinkSourceFactory::FOnLiveLinkSourceCreated, OnSourceCreated)
	SLATE_END_ARGS()

	void Construct(const FArguments& InArgs)
	{
		OnSourceCreated = InArgs._OnSourceCreated;
		ChildSlot
		[
			SNew(SBox).WidthOverride(320.0f).Padding(6.0f)
			[
				SNew(SVerticalBox)
				+ SVerticalBox::Slot().AutoHeight()[SNew(STextBlock).Text(LOCTEXT("Address", "Bridge address (HOST:PORT)"))]
				+ SVerticalBox::Slot().AutoHeight()[SAssignNew(AddressBox, SEditableTextBox).Text(FText::FromString(TEXT("127.0.0.1:50051")))]
				+ SVerticalBox::Slot().AutoHeight().Padding(0, 4, 0, 0)[SNew(STextBlock).Text(LOCTEXT("Token", "Token (if the bridge uses --grpc-token)"))]
				+ SVerticalBox::Slot().AutoHeight()[SAssignNew(TokenBox, SEditableTextBox).IsPassword(true)]
				+ SVerticalBox::Slot().AutoHeight().Padding(0, 4, 0, 0)[SNew(STextBlock).Text(LOCTEXT("Subjects", "Subjects, comma separated (empty: all)"))]
				+ SVerticalBox::Slot().AutoHeight()[SAssignNew(SubjectsBox, SEditableTextBox)]
				+ SVerticalBox::Slot().AutoHeight()[SAssignNew(ErrorText, STextBlock).ColorAndOpacity(FLinearColor::Red)]
				+ SVerticalBox::Slot().AutoHeight().HAlign(HAlign_Right).Padding(0, 6, 0, 0)
				[
					SNew(SButton).Text(LOCTEXT("Add", "Add")).OnClicked(this, &SFaceBridgeSourcePanel::OnAdd)
				]
			]
		];
	}

private:
	FReply OnAdd()
	{
		const FString ConnectionString = FString::Printf(TEXT("address=%s;subjects=%s;token=%s"),
			*AddressBox->GetText().ToString(), *SubjectsBox->GetText().ToString(), *TokenBox->GetText().ToString());
		facebridge::ClientSettings Settings;
		std::string Error;
		if (!facebridge::ParseConnectionString(TCHAR_TO_UTF8(*ConnectionString), &Settings, &Error))
		{
			ErrorText->SetText(FText::FromString(UTF8_TO_TCHAR(Error.c_str())));
			return FReply::Handled();
		}
		const FString Normalized = UTF8_TO_TCHAR(facebridge::FormatConnectionString(Settings).c_str());
		OnSourceCreated.ExecuteIfBound(MakeShared<FFaceBridgeLiveLinkSource>(Settings), Normalized);
		return FReply::Handled();
	}

	ULiveLinkSourceFactory::FOnLiveLinkSourceCreated OnSourceCreated;
	TSharedPtr<SEditableTextBox> AddressBox, TokenBox, SubjectsBox;
	TSharedPtr<STextBlock> ErrorText;
};
}  // namespace

FText UFaceBridgeLiveLinkSourceFactory::GetSourceDisplayName() const
{
	return LOCTEXT("DisplayName", "FaceBridge");
}

FText UFaceBridgeLiveLinkSourceFactory::GetSourceTooltip() const
{
	return LOCTEXT("Tooltip", "Face animation from a FaceBridge on this or another machine (gRPC): ARKit curves, "
	                          "emotion, gaze, head bones, timecode.");
}

TSharedPtr<SWidget> UFaceBridgeLiveLinkSourceFactory::BuildCreationPanel(
	FOnLiveLinkSourceCreated OnLiveLinkSourceCreated) const
{
	return SNew(SFaceBridgeSourcePanel).OnSourceCreated(OnLiveLinkSourceCreated);
}

TSharedPtr<ILiveLinkSource> UFaceBridgeLiveLinkSourceFactory::CreateSource(const FString& ConnectionString) const
{
	facebridge::ClientSettings Settings;
	std::string Error;
	if (!facebridge::ParseConnectionString(TCHAR_TO_UTF8(*ConnectionString), &Settings, &Error))
	{
		UE_LOG(LogTemp, Warning, TEXT("FaceBridge Live Link: bad connection string '%s': %s"), *ConnectionString,
		       UTF8_TO_TCHAR(Error.c_str()));
		return nullptr;
	}
	return MakeShared<FFaceBridgeLiveLinkSource>(Settings);
}

#undef LOCTEXT_NAMESPACE
